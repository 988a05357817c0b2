package providertest

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
)

// signalScript traps SIGINT in the command's shell and in a child it puts
// in a process group of its own, in the same session: a signal must
// reach both, each once.
const signalScript = `trap 'echo trapped; wait; exit 7' INT
` + python + ` -c '
import os, signal, sys, time
os.setpgid(0, 0)
signal.signal(signal.SIGINT, lambda *a: (print("child trapped", flush=True), sys.exit(3)))
print("ready", flush=True)
time.sleep(60)
' &
wait`

// testSignalCommand checks provider.Signaler: a signal reaches a running
// command's group and session once; KILL ends it; an ended command is
// no error; a signal outside provider.Signals, or a command the sandbox
// never ran, is bad input.
func testSignalCommand(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	sg, ok := sb.(provider.Signaler)
	if !ok {
		t.Skipf("the sandbox (%T) does not implement provider.Signaler", sb)
	}
	// start runs req in the background and waits for "ready" on its
	// stdout; the returned channel gives its result.
	start := func(t *testing.T, req provider.ExecRequest) (*testkit.SyncBuffer, <-chan result) {
		var out testkit.SyncBuffer
		req.Stdout = &out
		done := make(chan result, 1)
		go func() {
			r, err := executeCtx(timeout(t, opTimeout), sb, req)
			if err != nil {
				t.Errorf("Exec: %v", err)
			}
			done <- r
		}()
		eventually(t, opTimeout, "the command to start", func() (bool, string) {
			return strings.Contains(out.String(), "ready"), out.String()
		})
		return &out, done
	}
	ctx := timeout(t, opTimeout)

	t.Run("INT", func(t *testing.T) {
		id := s.newID(t)
		out, done := start(t, provider.ExecRequest{ID: id, Argv: []string{"/bin/sh", "-c", signalScript}})
		if err := sg.Signal(ctx, id, "INT"); err != nil {
			t.Fatalf("Signal INT: %v", err)
		}
		r := <-done
		if r.ExitCode != 7 {
			t.Errorf("exit code %d (signal %q), want 7, from the shell's trap", r.ExitCode, r.Signal)
		}
		got := out.String()
		if n := strings.Count(got, "child trapped"); n != 1 {
			t.Errorf("the child in a group of its own trapped SIGINT %d times, want once; output %q", n, got)
		}
		if n := strings.Count(got, "trapped") - strings.Count(got, "child trapped"); n != 1 {
			t.Errorf("the command's shell trapped SIGINT %d times, want once; output %q", n, got)
		}
		// Ended: signalling it again reaches nothing and is no error.
		if err := sg.Signal(ctx, id, "TERM"); err != nil {
			t.Errorf("Signal to an ended command: %v, want nil", err)
		}
	})
	t.Run("KILL", func(t *testing.T) {
		id := s.newID(t)
		_, done := start(t, provider.ExecRequest{ID: id, Shell: "echo ready; exec sleep 60"})
		began := time.Now()
		if err := sg.Signal(ctx, id, "SIGKILL"); err != nil {
			t.Fatalf("Signal SIGKILL: %v", err)
		}
		r := <-done
		if r.ExitCode != -1 || r.Signal != "SIGKILL" {
			t.Errorf("exit code %d, signal %q; want -1, SIGKILL", r.ExitCode, r.Signal)
		}
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("a killed command took %v to end", d)
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		for _, tt := range []struct{ name, id, sig string }{
			{"UnknownSignal", "never-ran", "STOP"},
			{"NoSignal", "never-ran", ""},
			{"UnknownCommand", "never-ran", "INT"},
			{"BadID", "../x", "INT"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				checkErrIs(t, sg.Signal(ctx, tt.id, tt.sig), errdefs.ErrBadInput, "Signal "+tt.sig+" to "+tt.id)
			})
		}
	})
	checkServing(t, sb)
}
