// Package gvisorinit is berth's daemon as the first process of a gVisor
// sandbox: the runsc container's process is berth-sandboxd, which calls
// [Main]. It serves [sandboxd] on a unix socket that runsc makes a
// socket of the host's, waits on a second one to be claimed by a
// sandbox, and enforces the sandbox's memory limit itself (see
// oomKiller), which gVisor's sentry does not.
//
// It links no host-side code: it runs inside the sandbox.
package gvisorinit

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/cabundle"
	"github.com/berth-dev/berth/provider/internal/warmclaim"
	"github.com/berth-dev/berth/sandboxd"
)

// The daemon is the first process of the runsc container: the bundle's
// process is the daemon binary, bind-mounted read-only at DaemonPath,
// with Arg as its first argument. It serves sandboxd on a unix socket
// in RunDir, which the host bind-mounts from the container's directory;
// runsc's --host-uds=create makes the sockets the daemon binds there
// real sockets of the host's, which the host connects to. A second
// socket there takes the claim: a warm daemon waits, serving but with
// commands held back, until a sandbox takes it and tells it its
// environment, working directory and end of life.
const (
	Arg        = "gvisor-init"
	DaemonPath = "/.berth/sandboxd"
	RunDir     = "/.berth/run"
	// sockets in RunDir
	SocketName    = "sandboxd.sock"
	ControlSocket = "control.sock"
	// ConfigEnv carries Config.
	ConfigEnv = "BERTH_GVISOR_INIT"
	// HostStatFD is the daemon's descriptor of its host memory cgroup's
	// memory.stat, when Config.HostStat says it has one.
	HostStatFD = 3
)

// Config is what the daemon needs from its start.
type Config struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Memory is the sandbox's memory limit, which the daemon enforces
	// (see oomKiller).
	Memory int64 `json:"memory"`
	// HostMemory is the host cgroup's memory limit; HostStat says the
	// daemon has its memory.stat open as descriptor HostStatFD.
	HostMemory int64 `json:"host_memory"`
	HostStat   bool  `json:"host_stat,omitempty"`
	// ProxyCA, if not empty, is the egress proxy's authority (PEM),
	// which the daemon installs in cabundle.Dir (a tmpfs the bundle
	// mounts there) for the sandbox to trust. It is public.
	ProxyCA string `json:"proxy_ca,omitempty"`
}

// Main runs the daemon when this process was started as a gVisor
// sandbox's first process, and then never returns. Otherwise it returns
// at once. Programs whose binary is the provider's Config.DaemonPath
// (berth-sandboxd, or a test binary) call it first thing in main (and
// in TestMain).
func Main() {
	if len(os.Args) < 2 || os.Args[1] != Arg {
		return
	}
	if err := runDaemon(); err != nil {
		fmt.Fprintf(os.Stderr, "berth-sandboxd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runDaemon() error {
	// A few MiB per sandbox matter more here than collection speed.
	debug.SetGCPercent(50)
	var cfg Config
	if err := json.Unmarshal([]byte(os.Getenv(ConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("read %s: %w", ConfigEnv, err)
	}
	os.Unsetenv(ConfigEnv)
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return fmt.Errorf("%s: the sandbox user must not be root", ConfigEnv)
	}
	if err := remountNodev(); err != nil {
		return err
	}
	if cfg.ProxyCA != "" {
		if err := cabundle.Install(cfg.ProxyCA); err != nil {
			return fmt.Errorf("%s: %w", cabundle.Dir, err)
		}
	}
	ln, err := warmclaim.Listen(RunDir + "/" + SocketName)
	if err != nil {
		return err
	}
	ctl, err := warmclaim.Listen(RunDir + "/" + ControlSocket)
	if err != nil {
		return err
	}
	oom := &oomKiller{limit: cfg.Memory, hostLimit: cfg.HostMemory, self: os.Getpid()}
	if cfg.HostStat {
		// Commands must not inherit it.
		unix.CloseOnExec(HostStatFD)
		oom.host = os.NewFile(HostStatFD, "memory.stat")
	}
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: "/workspace",
		UID:       cfg.UID,
		GID:       cfg.GID,
		Deferred:  true, // configured when claimed
		OOMKills:  oom.count,
	})
	if err != nil {
		return err
	}
	oom.hold = srv.Hold
	go oom.run()
	if err := srv.WarmUp("/bin/true"); err != nil {
		fmt.Fprintf(os.Stderr, "warm-up command: %v\n", err) // the root may have no /bin/true
	}
	return warmclaim.Serve(srv, ln, ctl, func(c warmclaim.Claim) error {
		return warmclaim.Apply(srv, c, maps.Clone(c.Env))
	})
}

// writable are the places commands may write, and their mount flags:
// runsc mounts a bundle's mounts without nodev, which the daemon adds.
var writable = []struct {
	dir   string
	flags uintptr
}{
	{"/workspace", unix.MS_NOSUID | unix.MS_NODEV},
	{"/tmp", unix.MS_NOSUID | unix.MS_NODEV},
	{"/dev/shm", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
}

func remountNodev() error {
	for _, m := range writable {
		if err := unix.Mount("", m.dir, "", unix.MS_REMOUNT|unix.MS_BIND|m.flags, ""); err != nil {
			return fmt.Errorf("remount %s nodev: %w", m.dir, err)
		}
	}
	return nil
}
