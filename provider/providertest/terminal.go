package providertest

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

// testTerminal runs an interactive shell on a terminal: the size asked,
// a resize, ^C reaching the foreground command, the exit code; then a
// command whose background process keeps the terminal open, which must
// end all the same.
func testTerminal(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	term, ok := sb.(provider.Terminal)
	if !ok {
		t.Fatalf("%T is not a provider.Terminal", sb)
	}
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	var first screen
	r, err := sb.Exec(ctx, provider.ExecRequest{Shell: "stty size; tty; exit 4", TTY: &provider.TerminalSize{Rows: 30, Cols: 100}, Stdout: &first})
	if err != nil || r.ExitCode != 4 || !strings.Contains(first.String(), "30 100") || !strings.Contains(first.String(), "/dev/pts/") {
		t.Fatalf("stty size; tty on a terminal of 30x100: exit %d, error %v, output %q", r.ExitCode, err, first.String())
	}
	var scr screen
	type result struct {
		res provider.ExecResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := sb.Exec(ctx, provider.ExecRequest{ID: "pt-shell", Argv: []string{"/bin/sh"},
			Env: map[string]string{"PS1": "$ "}, TTY: &provider.TerminalSize{Rows: 30, Cols: 100}, Stdout: &scr})
		done <- result{res, err}
	}()
	in := func(s string) {
		t.Helper()
		if err := term.TerminalInput(ctx, "pt-shell", []byte(s)); err != nil {
			t.Fatalf("TerminalInput(%q): %v", s, err)
		}
	}
	at := scr.waitFor(t, 0, "$ ")
	in("stty size; tty\n")
	at = scr.waitFor(t, at, "30 100")
	at = scr.waitFor(t, at, "/dev/pts/")
	if err := term.ResizeTerminal(ctx, "pt-shell", provider.TerminalSize{Rows: 40, Cols: 120}); err != nil {
		t.Fatalf("ResizeTerminal: %v", err)
	}
	in("stty size\n")
	at = scr.waitFor(t, at, "40 120")
	// The terminal echoes the line typed: sleep''ing is told apart.
	in("sh -c 'echo sleep''ing; exec sleep 60'\n")
	at = scr.waitFor(t, at, "sleeping")
	in("\x03")
	in("echo status=$?\n")
	at = scr.waitFor(t, at, "status=130")
	in("exit 7\n")
	select {
	case r := <-done:
		if r.err != nil || r.res.ExitCode != 7 {
			t.Fatalf("Exec: exit %d, error %v; output %q", r.res.ExitCode, r.err, scr.String())
		}
	case <-time.After(settleTimeout):
		t.Fatalf("the shell did not end; output %q", scr.String()[at:])
	}
	if err := term.TerminalInput(ctx, "pt-shell", []byte("x")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TerminalInput after the end: %v, want ErrNotFound", err)
	}

	var bg screen
	start := time.Now()
	r, err = sb.Exec(ctx, provider.ExecRequest{Shell: "trap '' HUP; sleep 30 & echo started; exit 3",
		TTY: &provider.TerminalSize{}, Stdout: &bg})
	if err != nil || r.ExitCode != 3 || !strings.Contains(bg.String(), "started") {
		t.Errorf("a command leaving a background process on its terminal: exit %d, error %v, output %q", r.ExitCode, err, bg.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("a command leaving a background process on its terminal took %v to end", took)
	}
}

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

// waitFor waits until the output after from holds want, and returns
// where it ends.
func (s *screen) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for time.Now().Before(deadline) {
		if out := s.String(); strings.Contains(out[from:], want) {
			return from + strings.Index(out[from:], want) + len(want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("terminal output %q lacks %q", s.String()[from:], want)
	return 0
}
