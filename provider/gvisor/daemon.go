package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/sandboxd"
)

// The daemon is the first process of the runsc container: the bundle's
// process is the daemon binary, bind-mounted read-only at daemonPath,
// with initArg as its first argument. It serves sandboxd on a unix socket
// in runDir, which the host bind-mounts from the container's directory;
// runsc's --host-uds=create makes the sockets the daemon binds there
// real sockets of the host's, which the host connects to. A second
// socket there takes the claim: a warm daemon waits, serving but with
// commands held back, until a sandbox takes it and tells it its
// environment, working directory and end of life.
const (
	initArg    = "gvisor-init"
	daemonPath = "/.berth/sandboxd"
	runDir     = "/.berth/run"
	// sockets in runDir
	socketName  = "sandboxd.sock"
	controlName = "control.sock"
	claimRoute  = "/claim"
	// configEnv carries daemonConfig.
	configEnv = "BERTH_GVISOR_INIT"
)

// daemonConfig is what the daemon needs from its start.
type daemonConfig struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Memory is the sandbox's memory limit, which the daemon enforces
	// (see oomKiller).
	Memory int64 `json:"memory"`
}

// claimMsg turns a warm daemon into one sandbox's daemon.
type claimMsg struct {
	Env       map[string]string `json:"env"`
	Dir       string            `json:"dir,omitempty"`
	ExpiresAt time.Time         `json:"expires_at"`
	// UserProcesses is the sandbox user's RLIMIT_NPROC.
	UserProcesses int64 `json:"user_processes"`
}

// Main runs the daemon when this process was started as a gVisor
// sandbox's first process, and then never returns. Otherwise it returns
// at once. Programs whose binary is the provider's DaemonPath call it
// first thing in main (and in TestMain).
func Main() {
	if len(os.Args) < 2 || os.Args[1] != initArg {
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
	var cfg daemonConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		return fmt.Errorf("read %s: %w", configEnv, err)
	}
	os.Unsetenv(configEnv)
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return fmt.Errorf("%s: the sandbox user must not be root", configEnv)
	}
	if err := remountNodev(); err != nil {
		return err
	}
	ln, err := listen(socketName)
	if err != nil {
		return err
	}
	ctl, err := listen(controlName)
	if err != nil {
		return err
	}
	oom := &oomKiller{limit: cfg.Memory, self: os.Getpid()}
	go oom.run()
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
	if err := srv.WarmUp("/bin/true"); err != nil {
		fmt.Fprintf(os.Stderr, "warm-up command: %v\n", err) // the root may have no /bin/true
	}
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()

	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+claimRoute, func(w http.ResponseWriter, r *http.Request) {
		var c claimMsg
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		err := errors.New("already claimed")
		once.Do(func() { err = claim(srv, c) })
		if err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { served <- hs.Serve(ctl) }()
	return <-served
}

func claim(srv *sandboxd.Server, c claimMsg) error {
	// The daemon is root of the sandbox, which the kernel exempts from
	// RLIMIT_NPROC: the limit holds its commands alone.
	if c.UserProcesses > 0 {
		lim := syscall.Rlimit{Cur: uint64(c.UserProcesses), Max: uint64(c.UserProcesses)}
		if err := syscall.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return fmt.Errorf("process limit: %w", err)
		}
	}
	srv.Configure(maps.Clone(c.Env), c.Dir)
	// The hard lifetime: the daemon is the container's first process,
	// and the container ends with it.
	time.AfterFunc(time.Until(c.ExpiresAt), func() { os.Exit(0) })
	return nil
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

// listen makes a socket in runDir that only the sandbox's root may
// connect to from inside.
func listen(name string) (net.Listener, error) {
	path := runDir + "/" + name
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// oomKiller enforces a sandbox's memory limit. gVisor's sentry keeps
// the memory of all the sandbox's processes, and the host's cgroup limit
// counts it whole: reached, the host's out-of-memory killer would take
// the sentry and with it the sandbox (the sentry's memory cgroup files
// are stubs, so nothing in it limits its processes). So the host's limit
// has headroom above the sandbox's (see hostMemory), and the daemon
// watches the sentry's count of the sandbox's memory: past the limit,
// it kills the command process that holds the most, as the kernel's
// killer would, and counts a kill, which sandboxd reports as the
// command running out of memory.
type oomKiller struct {
	limit int64
	self  int
	kills atomic.Int64
}

func (o *oomKiller) count() (int64, error) { return o.kills.Load(), nil }

// Polling intervals: short once usage is past half the limit, since
// a process can take hundreds of MiB a second.
const (
	oomPollIdle = 25 * time.Millisecond
	oomPollBusy = 2 * time.Millisecond
)

func (o *oomKiller) run() {
	if o.limit <= 0 {
		return
	}
	for {
		used, err := memoryUsed()
		wait := oomPollIdle
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "memory usage: %v\n", err)
		case used > o.limit:
			if o.killLargest() {
				o.kills.Add(1)
				// The memory comes back as the process exits.
				time.Sleep(20 * time.Millisecond)
				continue
			}
			wait = oomPollBusy
		case used > o.limit/2:
			wait = oomPollBusy
		}
		time.Sleep(wait)
	}
}

// memoryUsed is the sentry's count of the sandbox's memory: anonymous
// memory, tmpfs, page cache and mappings.
func memoryUsed() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total, free int64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v << 10
		case "MemFree:":
			free = v << 10
		}
	}
	if total == 0 {
		return 0, errors.New("no MemTotal in /proc/meminfo")
	}
	return total - free, nil
}

// killLargest kills the process, other than the daemon, with the most
// resident memory, and reports whether there was one.
func (o *oomKiller) killLargest() bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	victim, most := 0, int64(-1)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == o.self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/statm")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		if rss, _ := strconv.ParseInt(f[1], 10, 64); rss > most {
			victim, most = pid, rss
		}
	}
	return victim != 0 && unix.Kill(victim, unix.SIGKILL) == nil
}
