package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// serve runs a daemon over a temporary workspace, as the test's own user,
// and returns a client for it and the workspace directory.
func serve(t *testing.T) (*Client, string) {
	t.Helper()
	sock, ws := serveOn(t)
	c := NewClient(UnixDialer(sock))
	t.Cleanup(c.Close)
	return c, ws
}

// serveOn runs a daemon as serve does, and returns its socket and the
// workspace directory.
func serveOn(t *testing.T) (socket, workspace string) {
	t.Helper()
	s, sock := serveConfig(t, Config{})
	return sock, s.cfg.Workspace
}

// serveConfig runs a daemon of cfg on a socket of its own, in a new
// workspace as the test's user, until the test ends.
func serveConfig(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	cfg.Workspace, cfg.UID, cfg.GID = t.TempDir(), os.Geteuid(), os.Getegid()
	if cfg.Env == nil {
		cfg.Env = map[string]string{"PATH": "/usr/bin:/bin"}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	return s, sock
}

func TestExecOnce(t *testing.T) {
	c, ws := serve(t)
	req := provider.ExecRequest{ID: "once", Shell: "echo run >> log; echo out; echo err >&2; exit 3"}
	for i, wantAttached := range []bool{false, true} {
		var out, errb bytes.Buffer
		req.Stdout, req.Stderr = &out, &errb
		res, err := c.Exec(t.Context(), req)
		if err != nil {
			t.Fatalf("exec %d: %v", i, err)
		}
		if res.ExitCode != 3 || out.String() != "out\n" || errb.String() != "err\n" || res.Attached != wantAttached {
			t.Errorf("exec %d: exit %d, stdout %q, stderr %q, attached %v", i, res.ExitCode, out.String(), errb.String(), res.Attached)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "log")); string(b) != "run\n" {
		t.Errorf("command ran %d times, want once", strings.Count(string(b), "run"))
	}
}

func TestExecOffsets(t *testing.T) {
	c, _ := serve(t)
	req := provider.ExecRequest{ID: "digits", Argv: []string{"printf", "0123456789"}}
	if _, err := c.Exec(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	req.Stdout, req.StdoutOffset = &out, 4
	if _, err := c.Exec(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if out.String() != "456789" {
		t.Errorf("from offset 4: %q", out.String())
	}
}

func TestExecStdinAndNotFound(t *testing.T) {
	c, _ := serve(t)
	var out bytes.Buffer
	_, err := c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("hello"), Stdout: &out})
	if err != nil || out.String() != "hello" {
		t.Fatalf("cat: %q, %v", out.String(), err)
	}
	_, err = c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"no-such-command-xyz"}})
	if !errors.Is(err, errdefs.ErrCommandNotFound) || !errors.Is(err, errdefs.ErrBadInput) {
		t.Fatalf("missing command: %v", err)
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	c, _ := serve(t)
	start := time.Now()
	res, err := c.Exec(t.Context(), provider.ExecRequest{Shell: "sleep 30 & sleep 30", Timeout: 200 * time.Millisecond})
	if !errors.Is(err, errdefs.ErrTimeout) || !res.TimedOut {
		t.Fatalf("got %+v, %v; want a timeout", res, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestFilesConfined(t *testing.T) {
	c, ws := serve(t)
	ctx := t.Context()
	if err := c.WriteFile(ctx, "a/b.txt", strings.NewReader("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, "/workspace/a/b.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "hi" {
		t.Errorf("read back %q", b)
	}
	if err := os.Symlink("/etc", filepath.Join(ws, "evil")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "/etc/passwd", "evil/passwd", "a/../../x"} {
		if _, err := c.ReadFile(ctx, p); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("read %q: %v, want bad input", p, err)
		}
		if err := c.WriteFile(ctx, p, strings.NewReader("x"), 0); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("write %q: %v, want bad input", p, err)
		}
	}
	if _, err := c.ReadFile(ctx, "missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read missing: %v", err)
	}
}

// A daemon outside a PID namespace of its own (as here, in tests) must
// not take the host's new sessions for its command's escapees: a
// timeout once SIGKILLed other sandboxes' daemons on the same host.
func TestExecTimeoutSparesOtherSessions(t *testing.T) {
	c, _ := serve(t)
	done := make(chan error, 1)
	begun := &signalWriter{ch: make(chan struct{})}
	go func() {
		_, err := c.Exec(t.Context(), provider.ExecRequest{Shell: "echo begun; sleep 30", Stdout: begun, Timeout: 500 * time.Millisecond})
		done <- err
	}()
	<-begun.ch
	other := exec.Command("sleep", "30")
	other.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { other.Wait(); close(exited) }()
	t.Cleanup(func() { other.Process.Kill(); <-exited })
	if err := <-done; !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("got %v, want a timeout", err)
	}
	select {
	case <-exited:
		t.Fatal("the timeout killed a session that is not the command's")
	case <-time.After(300 * time.Millisecond):
	}
}

// signalWriter closes ch at its first write.
type signalWriter struct {
	once sync.Once
	ch   chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

// closingProxy passes connections through to a daemon, but closes each
// one when the second request on it arrives, unanswered: as a daemon
// restarted under a client's idle connection does.
func closingProxy(t *testing.T, daemon string) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				up, err := net.Dial("unix", daemon)
				if err != nil {
					return
				}
				defer up.Close()
				// One request and its answer, then close at the next.
				go io.Copy(conn, up)
				buf := make([]byte, 64<<10)
				requests := 0
				for {
					n, err := conn.Read(buf)
					if err != nil {
						return
					}
					if bytes.HasPrefix(buf[:n], []byte("POST ")) || bytes.HasPrefix(buf[:n], []byte("GET ")) {
						if requests++; requests == 2 {
							return
						}
					}
					if _, err := up.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return sock
}

// An Exec with an ID, sent on an idle connection the daemon has closed,
// is sent again on a new one instead of failing; and runs once.
func TestExecRetriedOnClosedConnection(t *testing.T) {
	sock, ws := serveOn(t)
	c := NewClient(UnixDialer(closingProxy(t, sock)))
	defer c.Close()
	for i, id := range []string{"first", "second", "third"} {
		res, err := c.Exec(t.Context(), provider.ExecRequest{ID: id, Shell: "echo " + id + " >> log"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec %d on a connection the daemon closed: %v, %+v", i, err, res)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "log")); string(b) != "first\nsecond\nthird\n" {
		t.Errorf("log %q: each command once, in order", b)
	}
}

// TestExecKeepsConnection checks that commands one after another share
// one connection: a new one per command costs a dial and an accept.
func TestExecKeepsConnection(t *testing.T) {
	_, sock := serveConfig(t, Config{})
	var dials atomic.Int32
	c := NewClient(func(ctx context.Context) (net.Conn, error) {
		dials.Add(1)
		return UnixDialer(sock)(ctx)
	})
	defer c.Close()
	for i := range 10 {
		var out bytes.Buffer
		res, err := c.Exec(t.Context(), provider.ExecRequest{Shell: "echo hi", Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "hi\n" {
			t.Fatalf("exec %d: %+v, %q, %v", i, res, out.String(), err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("10 commands dialled %d connections, want 1", n)
	}
}
