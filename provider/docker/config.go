package docker

import (
	"debug/elf"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/distribution/reference"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Config sets up the provider. The zero value is usable on a host whose
// Docker engine is at its default address.
type Config struct {
	// Host is the Docker engine's address ("unix:///var/run/docker.sock",
	// "tcp://host:2376"). Zero means DOCKER_HOST, else the default
	// socket. The engine must run on this host: sandboxes are reached
	// through sockets and workspaces in StateDir.
	Host string
	// StateDir holds each sandbox's record, sockets and workspace image.
	// Zero means /var/lib/berth/docker.
	StateDir string
	// DaemonPath is berth's daemon binary, bind-mounted read-only into
	// every container as its entrypoint; it must be static (CGO_ENABLED=0
	// go build ./cmd/berth-sandboxd). Zero means berth-sandboxd beside
	// this process's executable.
	DaemonPath string
	// Image is the image of a sandbox whose spec names none. Zero means
	// the default image, which the provider makes from the host's files
	// (a shell, coreutils, /usr/bin/python3 and their libraries; berth's
	// own /etc) in the background from its start, under HostImage,
	// unless the engine has it already.
	Image string
	// HostImage is the reference the default image is made under. Zero
	// means DefaultHostImage(): berth-host:1-VERSION.
	HostImage string
	// UIDBase and UIDCount are the host ids sandbox users take: each
	// sandbox's commands run under an id of their own in
	// [UIDBase, UIDBase+UIDCount), so that the kernel's per-user counts
	// (processes, signals, inotify) are each sandbox's alone. Zero
	// means 300000 and 65536. The range must be used by nothing else on
	// the host.
	UIDBase, UIDCount int
	// Defaults are the limits of a sandbox whose spec names none. Zero
	// fields mean 2 GiB of memory, 4096 processes, CPU unlimited, and a
	// workspace of 10 GiB (DefaultDisk) holding one file per 16 KiB.
	Defaults provider.Resources
	// Pool is how many started, unclaimed containers of the default
	// image the provider keeps ready once it has created a sandbox of
	// it, so that creation does not wait for Docker. Zero means 2; a
	// negative number keeps none.
	Pool int
	// Limits bound a sandbox's share of kernel counters no cgroup holds.
	// Zero fields mean the defaults documented on Limits.
	Limits Limits
	// PullTimeout bounds pulling an image that is not on the host. Zero
	// means 10 minutes.
	PullTimeout time.Duration
	// Network polices sandboxes' networks (NetworkAllow, and NetworkOpen
	// without private, metadata or host ranges) when its ProxyAddr is
	// set. Zero means no allow lists, and NetworkOpen on Docker's bridge,
	// unpoliced, as before (see docs/providers/docker.md).
	Network NetworkConfig
	// netSettings are the network settings of provider.Open, which
	// register.go starts hostNet from; Close stops it.
	netSettings hostnet.Settings
	hostNet     *hostnet.Host

	// Logger receives the provider's own events (image pulls among
	// them). Nil discards them.
	Logger *slog.Logger

	// Tests make the default image from a tree of their own, with
	// bounds and a wait of their own; zero means "/",
	// defaultRootBounds and hostImageWait.
	hostRoot   string
	hostBounds rootBounds
	hostWait   time.Duration
}

// NetworkConfig is the host side of sandboxes' networks, which the
// linux, docker and gvisor providers share (see hostnet.NetworkConfig).
type NetworkConfig = hostnet.NetworkConfig

// Limits bound what one sandbox may take of the kernel's counters that
// are kept per user or per process rather than per cgroup.
type Limits struct {
	// OpenFiles is RLIMIT_NOFILE of every process. Zero means 1024.
	OpenFiles int64
	// PendingSignals is RLIMIT_SIGPENDING. Zero means 1024.
	PendingSignals int64
	// DaemonReserve is how many of Resources.Pids are kept for the
	// daemon: the sandbox user's RLIMIT_NPROC is the rest. Zero means
	// 32, or a quarter of Pids when that is less.
	DaemonReserve int64
	// TmpFraction is the share of the memory limit /tmp and /dev/shm may
	// each hold. Zero means 0.25.
	TmpFraction float64
}

// Defaults of Config.
const (
	DefaultStateDir = "/var/lib/berth/docker"
	DefaultUIDBase  = 300000
	DefaultUIDCount = 65536
	// DefaultDisk is a workspace's size when neither the sandbox nor
	// the configuration names one.
	DefaultDisk = 10 << 30
	// MinDisk is the smallest workspace: what an ext4 image needs.
	MinDisk = 16 << 20
	// DaemonName is the daemon binary's name beside the executable.
	DaemonName = "berth-sandboxd"
)

func (c *Config) setDefaults() error {
	err := settings.StateDir(&c.StateDir, DefaultStateDir)
	if err != nil {
		return err
	}
	if c.DaemonPath == "" {
		if c.DaemonPath, err = settings.DaemonBeside(DaemonName, false); err != nil {
			return err
		}
	}
	if c.DaemonPath, err = filepath.Abs(c.DaemonPath); err != nil {
		return err
	}
	if err := checkStatic(c.DaemonPath); err != nil {
		return fmt.Errorf("%w: daemon binary %s: %v: build it with CGO_ENABLED=0 go build ./cmd/berth-sandboxd and set daemon=PATH", errdefs.ErrUnsupported, c.DaemonPath, err)
	}
	if c.UIDBase == 0 {
		c.UIDBase = DefaultUIDBase
	}
	if c.UIDCount == 0 {
		c.UIDCount = DefaultUIDCount
	}
	if c.UIDBase < 1000 || c.UIDCount < 1 {
		return fmt.Errorf("%w: uid range %d+%d must start at 1000 or more", errdefs.ErrBadInput, c.UIDBase, c.UIDCount)
	}
	if err := settings.Defaults(&c.Defaults, DefaultDisk, MinDisk); err != nil {
		return err
	}
	if err := provider.ValidateResources(c.Defaults); err != nil {
		return err
	}
	if c.Pool == 0 {
		c.Pool = 2
	}
	if c.PullTimeout == 0 {
		c.PullTimeout = 10 * time.Minute
	}
	l := &c.Limits
	if l.OpenFiles == 0 {
		l.OpenFiles = 1024
	}
	if l.PendingSignals == 0 {
		l.PendingSignals = 1024
	}
	if l.DaemonReserve == 0 {
		l.DaemonReserve = 32
	}
	if l.TmpFraction == 0 {
		l.TmpFraction = 0.25
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Image == "" {
		if c.HostImage == "" {
			c.HostImage = DefaultHostImage()
		}
		if _, err := reference.ParseNormalizedNamed(c.HostImage); err != nil {
			return fmt.Errorf("%w: host-image %.200q: %v", errdefs.ErrBadInput, c.HostImage, err)
		}
	}
	if c.hostRoot == "" {
		c.hostRoot = "/"
	}
	if c.hostBounds == (rootBounds{}) {
		c.hostBounds = defaultRootBounds
	}
	if c.hostWait == 0 {
		c.hostWait = hostImageWait
	}
	return nil
}

// userProcesses is the sandbox user's RLIMIT_NPROC under a limit of pids.
func (l Limits) userProcesses(pids int64) int64 {
	return pids - min(l.DaemonReserve, pids/4)
}

// fromProviderConfig decodes the text settings of provider.Open.
func fromProviderConfig(pc provider.Config) (Config, error) {
	var c Config
	err := settings.Decode(Name, pc, settings.Resources(&c.Defaults), map[string]settings.Setting{
		"host":         settings.String(&c.Host),
		"state-dir":    settings.String(&c.StateDir),
		"daemon":       settings.String(&c.DaemonPath),
		"image":        settings.String(&c.Image),
		"host-image":   settings.String(&c.HostImage),
		"uid-base":     settings.Int(&c.UIDBase),
		"uid-count":    settings.Int(&c.UIDCount),
		"pool":         settings.Int(&c.Pool),
		"pull-timeout": settings.Duration(&c.PullTimeout),
	}, c.netSettings.Decoders())
	return c, err
}

// checkStatic checks that path is an executable that needs no dynamic
// loader: it runs on whatever libraries the image has, or none.
func checkStatic(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return errors.New("not found")
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	f, err := elf.Open(path)
	if err != nil {
		return errors.New("not an ELF executable")
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return errors.New("dynamically linked")
		}
	}
	return nil
}

// networkDefaults are the network settings' defaults (see package
// hostnet and docs/providers/docker.md). The linux, docker and gvisor
// providers' differ, so that all three run on one host: each has a
// pool, a proxy and a DNS stub of its own.
func networkDefaults() hostnet.Defaults {
	return hostnet.Defaults{Pool: netip.MustParsePrefix("100.97.0.0/16"), ProxyPort: 15002, DNSPort: 15054}
}
