package linux

import (
	"log/slog"
	"path/filepath"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/settings"
	"github.com/berth-dev/berth/provider/linux/linuxinit"
)

// Config sets up the provider. The zero value is usable.
type Config struct {
	// StateDir holds one directory per sandbox: its record, its daemon's
	// socket and its workspace. Zero means /var/lib/berth/linux.
	StateDir string
	// DaemonPath is the binary started as each sandbox's daemon; it must
	// call Main. Zero means berth-sandboxd beside this process's
	// executable if there is one, else the executable itself (which then
	// costs each sandbox the memory its packages' initialisation takes).
	DaemonPath string
	// UIDBase places the host ids sandboxes map: ids 1 to 65535 inside
	// a sandbox (its user, 1000, among them) are UIDBase+id on the host.
	// Each sandbox's root, its daemon, is a host uid (and gid) of its own
	// from the 65536 after those (UIDBase+65536 on), which also owns its
	// user namespace, so that the kernel charges its per-user counters
	// to that sandbox alone and no two sandboxes' daemons share a uid; it
	// is taken while the daemon lives and reused after. Zero means
	// 100000. No one on the host may use these uids.
	UIDBase int
	// Defaults are the limits of a sandbox whose spec names none. Zero
	// fields mean 2 GiB of memory, 4096 processes, CPU unlimited, and a
	// workspace of 10 GiB (DefaultDisk) holding one file per 16 KiB.
	// Workspaces are sparse: they take host disk as they fill, so their
	// sizes may add up to more than the host has. Warm daemons have
	// workspaces of Defaults.Disk; a sandbox asking for another size
	// waits for a daemon to start.
	Defaults provider.Resources
	// Pool is how many warm daemons the provider keeps ready once it has
	// created a sandbox, so that the next creation does not wait for one
	// to start. Zero means 2; a negative number keeps none.
	Pool int
	// Limits bound what one sandbox may take of the kernel's counters
	// that no cgroup holds. Zero fields mean the defaults documented on
	// KernelLimits.
	Limits KernelLimits
	// ImageDir is the cache of root filesystems unpacked from images
	// (Spec.Image; see package image), owned from UIDBase; each sandbox
	// mounts its image with UIDBase mapped to its root, so that files of
	// an image's root are root's in the sandbox. It is root's alone
	// (0700), without set-id files: a daemon gets its root filesystem as
	// a detached mount, never by path. Zero means
	// StateDir/.images (a dot-directory, as the provider's own are).
	// Another cache directory may be shared only by providers with the
	// same UIDBase.
	ImageDir string
	// Network gives sandboxes networks beyond loopback (NetworkAllow
	// and NetworkOpen) when its ProxyAddr is set; zero means loopback
	// only, as before.
	Network NetworkConfig
	// Logger receives the provider's own events. Nil discards them.
	Logger *slog.Logger

	// netSettings are the network settings of provider.Open, which
	// register.go starts hostNet from; Close stops it.
	netSettings hostnet.Settings
	hostNet     *hostnet.Host
}

// NetworkConfig is the host side of sandboxes' networks, which the
// linux, docker and gvisor providers share (see hostnet.NetworkConfig).
type NetworkConfig = hostnet.NetworkConfig

// KernelLimits bound a sandbox's share of kernel resources counted per
// user rather than per cgroup, and of its own memory. What a sandbox's
// users take of per-user counters is also counted against the owner of
// its user namespace, a host uid of its own (see Config.UIDBase), and is
// bounded by these.
type KernelLimits struct {
	// OpenFiles is RLIMIT_NOFILE (soft and hard) of every process in a
	// sandbox, the daemon's included. A sandbox holds at most OpenFiles
	// times its sandbox user's processes (Resources.Pids less
	// DaemonReserve) open files, and each costs memory charged to it.
	// Zero means 1024.
	OpenFiles int64 `json:"open_files"`
	// PendingSignals is RLIMIT_SIGPENDING of every process: the signals
	// queued to the sandbox user's processes. Zero means 1024.
	PendingSignals int64 `json:"pending_signals"`
	// InotifyInstances and InotifyWatches are the sandbox's user
	// namespace's max_inotify_instances and max_inotify_watches. Zero
	// means 16 and 8192.
	InotifyInstances int64 `json:"inotify_instances"`
	InotifyWatches   int64 `json:"inotify_watches"`
	// DaemonReserve is how many of a sandbox's processes and threads
	// (Resources.Pids) are kept for its daemon: the sandbox user's
	// RLIMIT_NPROC is the rest, so that a fork bomb leaves the daemon
	// room to start threads and commands. Zero means 32, or a quarter of
	// Pids when that is less.
	DaemonReserve int64 `json:"daemon_reserve"`
	// TmpFraction is the share of a sandbox's memory limit that its /tmp
	// and its /dev/shm may each hold: their pages belong to no process,
	// so nothing the kernel kills when memory runs out frees them. Zero
	// means 0.25.
	TmpFraction float64 `json:"tmp_fraction"`
	// MemoryReserve is how much of a sandbox's memory limit its commands
	// cannot take, so that the daemon can serve (read, export, start
	// commands) when they have taken all they can: commands run in a
	// cgroup limited to the sandbox's limit less the reserve. Zero means
	// 16 MiB, or a quarter of the memory limit when that is less. It is
	// kept on cgroup v1 hosts; on cgroup v2 commands and daemon share the
	// limit.
	MemoryReserve int64 `json:"memory_reserve"`
}

func (l *KernelLimits) setDefaults() {
	for _, f := range []struct {
		v   *int64
		def int64
	}{
		{&l.OpenFiles, 1024}, {&l.PendingSignals, 1024},
		{&l.InotifyInstances, 16}, {&l.InotifyWatches, 8192},
		{&l.DaemonReserve, 32}, {&l.MemoryReserve, 16 << 20},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if l.TmpFraction == 0 {
		l.TmpFraction = 0.25
	}
}

// userProcesses is the sandbox user's RLIMIT_NPROC in a sandbox limited
// to pids processes and threads.
func (l KernelLimits) userProcesses(pids int64) int64 {
	return pids - min(l.DaemonReserve, pids/4)
}

// commandMemory is the memory limit of the commands of a sandbox limited
// to memory bytes.
func (l KernelLimits) commandMemory(memory int64) int64 {
	return memory - min(l.MemoryReserve, memory/4)
}

// tmpSize is the size of /tmp and /dev/shm in a sandbox limited to
// memory bytes.
func (l KernelLimits) tmpSize(memory int64) int64 {
	return int64(float64(memory) * l.TmpFraction)
}

// daemon is what of the limits the daemon sets itself.
func (l KernelLimits) daemon() linuxinit.Limits {
	return linuxinit.Limits{OpenFiles: l.OpenFiles, PendingSignals: l.PendingSignals,
		InotifyInstances: l.InotifyInstances, InotifyWatches: l.InotifyWatches}
}

// Identities inside a sandbox.
const (
	idRange    = 65536
	sandboxUID = linuxinit.UID // the unprivileged user commands run as
	sandboxGID = linuxinit.GID
)

func (c *Config) setDefaults() error {
	if err := settings.StateDir(&c.StateDir, "/var/lib/berth/linux"); err != nil {
		return err
	}
	if c.ImageDir == "" {
		c.ImageDir = filepath.Join(c.StateDir, ".images")
	}
	if c.DaemonPath == "" {
		d, err := settings.DaemonBeside(DaemonName, true)
		if err != nil {
			return err
		}
		c.DaemonPath = d
	}
	if c.UIDBase == 0 {
		c.UIDBase = 100000
	}
	if err := settings.Defaults(&c.Defaults, DefaultDisk, MinDisk); err != nil {
		return err
	}
	if c.Pool == 0 {
		c.Pool = 2
	}
	c.Limits.setDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DaemonName is the name of the dedicated daemon binary.
const DaemonName = "berth-sandboxd"

// fromProviderConfig decodes the text settings of provider.Open.
func fromProviderConfig(pc provider.Config) (Config, error) {
	var c Config
	err := settings.Decode(Name, pc, settings.Resources(&c.Defaults), map[string]settings.Setting{
		"state-dir": settings.String(&c.StateDir),
		"daemon":    settings.String(&c.DaemonPath),
		"image-dir": settings.String(&c.ImageDir),
		"uid-base":  settings.Int(&c.UIDBase),
		"pool":      settings.Int(&c.Pool),
	}, c.netSettings.Decoders())
	return c, err
}

// networkDefaults are the network settings' defaults (see package
// hostnet and docs/providers/linux.md). The linux, docker and gvisor
// providers' differ, so that all three run on one host: each has a
// pool, a proxy and a DNS stub of its own.
func networkDefaults() hostnet.Defaults {
	return hostnet.Defaults{Pool: netns.DefaultPool, ProxyPort: 15001, DNSPort: 15053}
}
