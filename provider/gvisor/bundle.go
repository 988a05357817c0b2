package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/berth-dev/berth/errdefs"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
	"github.com/berth-dev/berth/provider/internal/cabundle"
	"github.com/berth-dev/berth/provider/internal/sandboxspec"
)

// A container's directory, below the state directory's .containers,
// holds its OCI bundle and what the host keeps for it:
//
//	config.json    the bundle's spec
//	rootfs/        the root: mount points only, read-only to the sandbox
//	etc/           files bound over the host's /etc (passwd, hosts...)
//	run/           bound at gvisorinit.RunDir: the daemon's sockets
//	workspace/     where the workspace image is mounted, bound at /workspace
//	workspace.img  the workspace's file system
//	daemon.log     what the daemon printed; runsc.log what runsc did
//	runsc.pid      the sandbox process's pid, as runsc run wrote it
//	paused         present while the sandbox is paused
const (
	bundleRoot   = "rootfs"
	etcDir       = "etc"
	runSubdir    = "run"
	workspaceDir = "workspace"
	imageFile    = "workspace.img"
	daemonLog    = "daemon.log"
	runscLog     = "runsc.log"
	runscPid     = "runsc.pid" // the sandbox process's pid, written by runsc run
	pausedFile   = "paused"
)

// Identities inside a sandbox: the daemon is its root, commands run as
// sandboxUID. gVisor's sentry keeps them apart, and files in the
// workspace are owned by sandboxUID on the host too.
const (
	sandboxUID = 1000
	sandboxGID = 1000
)

// hostEntries are what a sandbox sees of the host's root when it has no
// root filesystem of its own: read-only binds, and on merged-/usr hosts
// the symbolic links into /usr, copied as such.
var hostEntries = []string{"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// reserved names are mounted by berth whatever the root filesystem holds.
var reserved = map[string]bool{"workspace": true, "tmp": true, "proc": true, "dev": true, "sys": true, ".berth": true}

// sandboxEtc are the files of /etc the sandbox sees instead of the
// host's.
var sandboxEtc = sandboxspec.Etc()

// daemonCaps are what the daemon needs of root inside the sandbox: to
// run commands as the sandbox user and act on files as them (SETUID,
// SETGID), to kill its commands (KILL), to remove what the user made
// read-only (DAC_OVERRIDE), to confine its file operations to the
// workspace (SYS_CHROOT: see sandboxd's asUser), to mount the writable
// places nodev, which runsc does not (SYS_ADMIN), and to count the
// kernel buffers its commands hold (SYS_PTRACE: see gvisorinit's scanBuffers); all
// gVisor's, not the host's. Commands have none.
var daemonCaps = []string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_SYS_CHROOT", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE"}

// bundleSpec is what a container is made from.
type bundleSpec struct {
	dir       string // the container's directory
	rootfs    string // a root filesystem directory, or "" for the host's
	daemon    string // the daemon binary on the host
	resources provider.Resources
	openFiles int64
	cgroup    string // cgroupsPath
	hostStat  bool   // the daemon is passed its memory cgroup's memory.stat
	// netns is the network namespace the sandbox joins, "" for a new
	// one; resolvConf, if not "", is its /etc/resolv.conf.
	netns, resolvConf string
	// proxyCA, if not "", is the egress proxy's authority, which the
	// daemon installs on a tmpfs at cabundle.Dir.
	proxyCA string
}

// writeBundle makes the container's directory: its root of mount points
// and its config.json.
func writeBundle(b bundleSpec) error {
	root := filepath.Join(b.dir, bundleRoot)
	for _, d := range []string{root, filepath.Join(b.dir, runSubdir), filepath.Join(b.dir, workspaceDir), filepath.Join(b.dir, etcDir)} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return err
	}
	var mounts []specs.Mount
	bindRO := func(src, dst string) {
		mounts = append(mounts, specs.Mount{Destination: dst, Source: src, Type: "bind",
			Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	// Entries of the root, each a read-only bind, or a symbolic link
	// copied as such.
	src, names := "/", hostEntries
	if b.rootfs != "" {
		src = b.rootfs
		entries, err := os.ReadDir(b.rootfs)
		if err != nil {
			return fmt.Errorf("%w: read root filesystem: %v", errdefs.ErrBadInput, err)
		}
		names = nil
		for _, e := range entries {
			if !reserved[e.Name()] && (b.proxyCA == "" || "/"+e.Name() != cabundle.Dir) {
				names = append(names, e.Name())
			}
		}
	}
	for _, name := range names {
		isDir, err := mountPoint(filepath.Join(src, name), filepath.Join(root, name))
		if err != nil {
			return err
		}
		if isDir != nil {
			bindRO(filepath.Join(src, name), "/"+name)
		}
	}
	for _, d := range []string{"workspace", "tmp", "proc", "dev", "sys", ".berth", ".berth/run"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, gvisorinit.DaemonPath), nil, 0o755); err != nil {
		return err
	}
	if b.proxyCA != "" {
		// The daemon writes the bundles there as it starts, then makes
		// it read-only (see cabundle.Install).
		if err := os.Mkdir(filepath.Join(root, cabundle.Dir), 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		mounts = append(mounts, specs.Mount{Destination: cabundle.Dir, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "noexec", "mode=755", "size=" + strconv.Itoa(cabundle.Size(nil, b.proxyCA)+cabundle.MaxSystemBundle)}})
	}
	// The sandbox's own passwd, hosts..., over the host's; its own
	// resolv.conf over the host's or the image's.
	etc := map[string]string{}
	if b.rootfs == "" {
		maps.Copy(etc, sandboxEtc)
	}
	if b.resolvConf != "" && regularEtcFile(src, "resolv.conf") {
		etc["resolv.conf"] = b.resolvConf
	}
	for _, name := range slices.Sorted(maps.Keys(etc)) {
		if _, err := os.Stat(filepath.Join(src, "etc", name)); err != nil {
			continue // a bind needs a file to cover
		}
		f := filepath.Join(b.dir, etcDir, name)
		if err := os.WriteFile(f, []byte(etc[name]), 0o644); err != nil {
			return err
		}
		bindRO(f, "/etc/"+name)
	}
	tmpSize := "size=" + strconv.FormatInt(b.resources.Memory/4, 10)
	mounts = append([]specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", tmpSize}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", tmpSize}},
	}, mounts...)
	mounts = append(mounts,
		specs.Mount{Destination: provider.Workspace, Source: filepath.Join(b.dir, workspaceDir), Type: "bind",
			Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		specs.Mount{Destination: gvisorinit.RunDir, Source: filepath.Join(b.dir, runSubdir), Type: "bind",
			Options: []string{"rbind", "rw", "nosuid", "nodev", "noexec"}},
	)
	bindRO(b.daemon, gvisorinit.DaemonPath)

	memory := hostMemory(b.resources.Memory)
	cfg, err := json.Marshal(gvisorinit.Config{UID: sandboxUID, GID: sandboxGID, Memory: b.resources.Memory,
		HostMemory: memory, HostStat: b.hostStat, ProxyCA: b.proxyCA})
	if err != nil {
		return err
	}
	pids := hostPids(b.resources.Pids)
	swap := memory // no swap beyond the limit
	res := &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &memory, Swap: &swap},
		Pids:   &specs.LinuxPids{Limit: &pids},
	}
	if b.resources.CPU > 0 {
		period := uint64(100_000)
		quota := int64(b.resources.CPU * float64(period))
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	spec := specs.Spec{
		Version:  specs.Version,
		Hostname: "sandbox",
		Root:     &specs.Root{Path: root, Readonly: true},
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{gvisorinit.DaemonPath, gvisorinit.Arg},
			Env:  []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", gvisorinit.ConfigEnv + "=" + string(cfg)},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: daemonCaps, Effective: daemonCaps, Permitted: daemonCaps,
			},
			NoNewPrivileges: true,
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: uint64(b.openFiles), Soft: uint64(b.openFiles)},
			},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			CgroupsPath: b.cgroup,
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace, Path: b.netns}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
		},
	}
	data, err := json.MarshalIndent(&spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.dir, "config.json"), data, 0o600)
}

// regularEtcFile says whether root's etc/name is a regular file, with
// no symbolic link on the way: a bind over it stays in the sandbox's
// /etc.
func regularEtcFile(root, name string) bool {
	fi, err := os.Lstat(filepath.Join(root, "etc"))
	if err != nil || !fi.IsDir() {
		return false
	}
	fi, err = os.Lstat(filepath.Join(root, "etc", name))
	return err == nil && fi.Mode().IsRegular()
}

// hostMemory is the host's memory limit of a sandbox limited to memory
// bytes. The daemon holds what the sandbox's processes use to memory
// (see gvisorinit's oomKiller): gVisor's count of it, and the kernel buffers that the
// sentry keeps in its own heap. The host's limit adds the sentry's and
// gofer's own memory (50-60 MiB) and what processes take between two
// looks of the daemon (256 MiB in all), and the buffers that killed
// commands freed but that the sentry's collector has not yet given back:
// up to as much again as the sandbox's limit (Go's heap grows to twice
// its live size before it collects). Reaching it loses the sandbox.
func hostMemory(memory int64) int64 { return 2*memory + 256<<20 }

// hostPids is the host's process limit of a sandbox limited to pids
// processes: the sandbox's processes are tasks of the sentry, bounded
// by the sandbox user's RLIMIT_NPROC in it, and the sentry runs them on
// host threads of its own, which must not run out first (the sentry
// would die).
func hostPids(pids int64) int64 { return 2*pids + 512 }

// mountPoint makes in the bundle's root what an entry src of a root
// needs: a copy of a symbolic link, or an empty directory or file to
// bind on. It returns a non-nil isDir when src is to be bound.
func mountPoint(src, dst string) (isDir *bool, err error) {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return nil, err
		}
		return nil, os.Symlink(target, dst)
	case fi.IsDir():
		t := true
		return &t, os.Mkdir(dst, 0o755)
	case fi.Mode().IsRegular():
		f := false
		return &f, os.WriteFile(dst, nil, 0o644)
	}
	return nil, nil // devices, sockets...: not part of a sandbox's root
}
