// Package warmclaim is how a warm daemon, the first process of a
// started container, becomes one sandbox's: it serves sandboxd with
// commands held back, and waits on a second socket, its control socket,
// for the host to claim it, telling it the sandbox's environment,
// working directory, process limit and end of life. The docker and
// gvisor providers' daemons take claims, and their hosts send them,
// through it.
package warmclaim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/sandboxd"
)

// Path is the control socket's only route.
const Path = "/claim"

// Claim is what the host tells a daemon when a sandbox takes it.
type Claim struct {
	Env map[string]string `json:"env"`
	Dir string            `json:"dir,omitempty"`
	// ExpiresAt ends the sandbox: the daemon exits, and the container
	// with it.
	ExpiresAt time.Time `json:"expires_at"`
	// Lease is Spec.Lease: see sandboxd.Server.SetLease.
	Lease time.Duration `json:"lease,omitempty"`
	// UserProcesses is the sandbox user's RLIMIT_NPROC.
	UserProcesses int64 `json:"user_processes"`
}

// Listen makes a unix socket at path that only root (the daemon's
// user) may connect to, replacing what a daemon before it left there.
func Listen(path string) (net.Listener, error) {
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

// Serve serves srv on ln, and the claim on ctl: the first claim goes to
// take, and any later one is refused. It returns when either server
// fails.
func Serve(srv *sandboxd.Server, ln, ctl net.Listener, take func(Claim) error) error {
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()

	var mu sync.Mutex
	claimed := false
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		var c Claim
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if claimed {
			http.Error(w, "claimed already", http.StatusConflict)
			return
		}
		claimed = true
		if err := take(c); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { served <- hs.Serve(ctl) }()
	return <-served
}

// Apply makes the daemon c's sandbox's: it limits the sandbox user's
// processes, gives srv the commands' environment env and working
// directory, and ends the process, and with it the container, at the
// sandbox's end of life.
func Apply(srv *sandboxd.Server, c Claim, env map[string]string) error {
	// Lowering a limit needs no privilege. The daemon is root, which the
	// kernel exempts from RLIMIT_NPROC: the limit holds its commands
	// alone.
	if c.UserProcesses > 0 {
		lim := syscall.Rlimit{Cur: uint64(c.UserProcesses), Max: uint64(c.UserProcesses)}
		if err := syscall.Setrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return fmt.Errorf("process limit: %w", err)
		}
	}
	srv.Configure(env, c.Dir)
	srv.SetLease(c.Lease)
	time.AfterFunc(time.Until(c.ExpiresAt), func() { os.Exit(0) })
	return nil
}

// Send claims a daemon: hc reaches its control socket.
func Send(ctx context.Context, hc *http.Client, c Claim) error {
	body, err := json.Marshal(c)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://daemon"+Path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
