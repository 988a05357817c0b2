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
	"sync"
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
	ln, err := listen(socketName)
	if err != nil {
		return err
	}
	ctl, err := listen(controlName)
	if err != nil {
		return err
	}
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: "/workspace",
		UID:       cfg.UID,
		GID:       cfg.GID,
		Deferred:  true, // configured when claimed
		// The sentry's out-of-memory killer picks the command before
		// the daemon.
		CommandOOMScoreAdj: 1000,
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
