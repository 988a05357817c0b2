package remotefake

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
)

// newMachine makes a machine of the tests' farm, destroyed at the test's
// end.
func newMachine(t *testing.T, env map[string]string) *Machine {
	t.Helper()
	m, err := farm.Create(t.Context(), t.Name()+"-"+randomHex(3), env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Destroy(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return m
}

// runCmd runs c to its end and returns its output and exit code.
func runCmd(t *testing.T, m *Machine, c Command) (stdout, stderr string, code int) {
	t.Helper()
	p, err := m.Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	var eb bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&eb, p.Stderr()); close(done) }()
	ob, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	<-done
	code, err = p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return string(ob), eb.String(), code
}

func TestStart(t *testing.T) {
	t.Parallel()
	m := newMachine(t, map[string]string{"BASE": "b"})
	t.Run("output", func(t *testing.T) {
		out, errOut, code := runCmd(t, m, Command{
			Argv: []string{"sh", "-c", `echo "out $BASE $ADDED $(pwd) $(id -u)"; echo err >&2; exit 3`},
			Env:  map[string]string{"ADDED": "a"},
			Dir:  "/tmp",
		})
		if out != "out b a /tmp 0\n" || errOut != "err\n" || code != 3 {
			t.Fatalf("stdout %q, stderr %q, code %d; want %q, %q, 3", out, errOut, code, "out b a /tmp 0\n", "err\n")
		}
	})
	t.Run("user", func(t *testing.T) {
		out, _, code := runCmd(t, m, Command{Argv: []string{"sh", "-c", `echo $(id -u) $(id -g) $HOME $(pwd)`}, User: "user", Dir: "/workspace"})
		if out != "1000 1000 /home/user /workspace\n" || code != 0 {
			t.Fatalf("stdout %q, code %d", out, code)
		}
	})
	t.Run("pid", func(t *testing.T) {
		p, err := m.Start(t.Context(), Command{Argv: []string{"sh", "-c", `echo $$`}})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(p.Stdout())
		if got := strings.TrimSpace(string(out)); got != strconv.Itoa(p.PID()) {
			t.Fatalf("the process says its pid is %q, PID() %d", got, p.PID())
		}
	})
	t.Run("not found", func(t *testing.T) {
		_, _, code := runCmd(t, m, Command{Argv: []string{"no-such-command"}})
		if code != 127 {
			t.Fatalf("code %d, want 127", code)
		}
	})
	t.Run("no such directory", func(t *testing.T) {
		p, err := m.Start(t.Context(), Command{Argv: []string{"true"}, Dir: "/no/such/dir"})
		if err == nil {
			code, err := p.Wait()
			t.Fatalf("Start in a missing directory: exit code %d, %v; want an error", code, err)
		}
		if !errors.Is(err, errdefs.ErrBadInput) {
			t.Fatalf("Start in a missing directory: %v, want ErrBadInput", err)
		}
	})
	t.Run("signal", func(t *testing.T) {
		p, err := m.Start(t.Context(), Command{Argv: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Signal(t.Context(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code, err := p.Wait()
		if err != nil || code != 128+int(syscall.SIGTERM) {
			t.Fatalf("Wait: %d, %v; want %d", code, err, 128+int(syscall.SIGTERM))
		}
		if err := p.Signal(t.Context(), syscall.SIGTERM); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("Signal of an exited process: %v, want ErrNotFound", err)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		p, err := m.Start(t.Context(), Command{Argv: []string{"sh", "-c", "read a; echo got $a; cat"}, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(p.Stdin(), "one\ntwo\n")
		p.Stdin().Close()
		out, _ := io.ReadAll(p.Stdout())
		if code, err := p.Wait(); string(out) != "got one\ntwo\n" || code != 0 || err != nil {
			t.Fatalf("stdout %q, code %d, %v", out, code, err)
		}
	})
	t.Run("outlives ctx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		p, err := m.Start(ctx, Command{Argv: []string{"sh", "-c", "read a; echo after $a"}, Stdin: true})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		// Long enough for a process bound to ctx to have ended.
		time.Sleep(200 * time.Millisecond)
		io.WriteString(p.Stdin(), "cancel\n")
		out, _ := io.ReadAll(p.Stdout())
		if code, err := p.Wait(); string(out) != "after cancel\n" || code != 0 || err != nil {
			t.Fatalf("stdout %q, code %d, %v", out, code, err)
		}
	})
	t.Run("large output", func(t *testing.T) {
		// More than the pipe keeps: nothing is lost while the reader
		// lags.
		p, err := m.Start(t.Context(), Command{Argv: []string{"sh", "-c", "head -c 10000000 /dev/zero; echo end >&2"}})
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, p.Stderr())
		n, _ := io.Copy(io.Discard, p.Stdout())
		if code, err := p.Wait(); n != 10000000 || code != 0 || err != nil {
			t.Fatalf("%d bytes, code %d, %v", n, code, err)
		}
	})
}
