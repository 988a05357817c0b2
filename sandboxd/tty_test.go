package sandboxd

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// screen collects a terminal's output for a test to wait on.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor waits until the output holds want, after what it held at from.
func (s *screen) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out := s.String()
		if i := strings.Index(out[from:], want); i >= 0 {
			return from + i + len(want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("terminal output %q lacks %q", s.String()[from:], want)
	return 0
}

func TestTerminal(t *testing.T) {
	c, _ := serve(t)
	var scr screen
	type result struct {
		res provider.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Exec(t.Context(), provider.ExecRequest{ID: "sh", Argv: []string{"/bin/sh"},
			Env: map[string]string{"PS1": "$ "}, TTY: &provider.TerminalSize{Rows: 30, Cols: 100}, Stdout: &scr})
		done <- result{res, err}
	}()
	in := func(s string) {
		t.Helper()
		if err := c.TerminalInput(t.Context(), "sh", []byte(s)); err != nil {
			t.Fatalf("input %q: %v", s, err)
		}
	}
	// The shell sees a terminal of the size asked.
	at := scr.waitFor(t, 0, "$ ")
	in("stty size; tty\n")
	at = scr.waitFor(t, at, "30 100")
	at = scr.waitFor(t, at, "/dev/pts/")
	if err := c.ResizeTerminal(t.Context(), "sh", provider.TerminalSize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	in("stty size\n")
	at = scr.waitFor(t, at, "40 120")
	// ^C reaches the foreground command through the line discipline.
	// (The terminal echoes the line typed: sleep''ing is told apart.)
	in("sh -c 'echo sleep''ing; exec sleep 60'\n")
	at = scr.waitFor(t, at, "sleeping")
	in("\x03")
	in("echo status=$?\n")
	at = scr.waitFor(t, at, "status=130")
	in("exit 7\n")
	select {
	case r := <-done:
		if r.err != nil || r.res.ExitCode != 7 {
			t.Fatalf("exit %d, err %v; output %q", r.res.ExitCode, r.err, scr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the shell did not end; output %q", scr.String()[at:])
	}
	if err := c.TerminalInput(t.Context(), "sh", []byte("x")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("input after the end: %v, want ErrNotFound", err)
	}
	if err := c.ResizeTerminal(t.Context(), "nope", provider.TerminalSize{Rows: 1, Cols: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("resize of no command: %v, want ErrNotFound", err)
	}
	_, err := c.Exec(t.Context(), provider.ExecRequest{ID: "big", Argv: []string{"true"}, TTY: &provider.TerminalSize{Rows: 5000}})
	if !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("a terminal of 5000 rows: %v, want ErrBadInput", err)
	}
}

// TestTerminalBackgroundHolder: a process left in the background that
// keeps the terminal open does not hold up the end of the command that
// started it, as it would with a master read that cannot time out. (The
// shell ignores SIGHUP before it starts sleep, which the kernel would
// otherwise send it when the shell, the terminal's controlling process,
// exits.)
func TestTerminalBackgroundHolder(t *testing.T) {
	c, _ := serve(t)
	var scr screen
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	start := time.Now()
	res, err := c.Exec(ctx, provider.ExecRequest{ID: "bg", Shell: "trap '' HUP; sleep 10 & echo started; exit 3",
		TTY: &provider.TerminalSize{}, Stdout: &scr})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second || res.ExitCode != 3 || !strings.Contains(scr.String(), "started") {
		t.Errorf("took %v, exit %d, output %q", took, res.ExitCode, scr.String())
	}
}
