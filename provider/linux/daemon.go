package linux

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/sandboxd"
)

// Main runs the sandbox daemon when this process was started as one by
// the provider, and then never returns. Otherwise it returns at once.
// Programs that create linux sandboxes call it first thing in main and in
// TestMain.
func Main() {
	if len(os.Args) == 0 || os.Args[0] != daemonArg0 {
		return
	}
	unix.Close(fdExe) // only needed to start
	status := os.NewFile(fdStatus, "status")
	if err := runDaemon(status); err != nil {
		fmt.Fprintf(status, "%v\n", err)
		fmt.Fprintf(os.Stderr, "berth-sandboxd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runDaemon is the sandbox's first process: it builds the sandbox's view
// of the world, locks itself down, and serves.
func runDaemon(status *os.File) error {
	// A few MiB per sandbox matter more here than collection speed.
	debug.SetMemoryLimit(16 << 20)

	var cfg daemonConfig
	cfgFile := os.NewFile(fdConfig, "config")
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cfgFile.Close()

	if err := setupRoot(cfg); err != nil {
		return fmt.Errorf("set up root filesystem: %w", err)
	}
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring up loopback: %w", err)
	}
	oom := os.NewFile(fdOOM, "oom")
	var oomMu sync.Mutex
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: "/workspace",
		UID:       sandboxUID,
		GID:       sandboxGID,
		Env:       cfg.Env,
		Dir:       cfg.Dir,
		OOMKills: func() (int64, error) {
			oomMu.Lock()
			defer oomMu.Unlock()
			return readOOMKills(oom)
		},
	})
	if err != nil {
		return err
	}
	if err := confine(); err != nil {
		return fmt.Errorf("confine: %w", err)
	}
	ln, err := net.FileListener(os.NewFile(fdListener, "listener"))
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	// The hard lifetime: when it ends the daemon exits, and being the
	// first process of the PID namespace, takes every process with it.
	time.AfterFunc(time.Until(cfg.ExpiresAt), func() { os.Exit(0) })

	if _, err := status.WriteString(statusReady); err != nil {
		return err
	}
	status.Close()
	return srv.Serve(ln)
}

// loopbackUp brings up the sandbox's own loopback interface, its only
// network.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
