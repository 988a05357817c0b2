package hostproc

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const childEnv = "HOSTPROC_TEST_CHILD"

// TestMain lets the test binary be the process followed: it runs until
// its stdin closes.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	start uint64
}

// spawn starts the test binary as a child under the name name, which
// becomes its command name in /proc/pid/stat.
func spawn(t *testing.T, name string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(link)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if c.start, err = Start(cmd.Process.Pid); err != nil {
		t.Fatalf("Start of a running child: %v", err)
	}
	return c
}

// exited waits until the child has exited, leaving it unreaped.
func (c *child) exited(t *testing.T) {
	t.Helper()
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, c.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
		t.Fatal(err)
	}
}

func TestStart(t *testing.T) {
	for _, name := range []string{"plain", "a) b (c) d", "x y"} {
		t.Run(name, func(t *testing.T) {
			c := spawn(t, name)
			comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(c.cmd.Process.Pid), "comm"))
			if err != nil {
				t.Fatal(err)
			}
			if string(comm) != name+"\n" {
				t.Fatalf("child's command name is %q, want %q", comm, name)
			}
			self, err := Start(os.Getpid())
			if err != nil {
				t.Fatal(err)
			}
			// Started after this process, in ticks since boot.
			if c.start < self {
				t.Errorf("child started at %d, before its parent at %d", c.start, self)
			}
			if !Alive(c.cmd.Process.Pid, c.start) {
				t.Error("a running child is not alive")
			}
		})
	}
}

func TestNotAlive(t *testing.T) {
	c := spawn(t, "dies")
	pid := c.cmd.Process.Pid
	tests := []struct {
		name  string
		pid   int
		start uint64
	}{
		{"zero pid", 0, 0},
		{"negative pid", -1, 0},
		{"pid reused", pid, c.start + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if Alive(tt.pid, tt.start) {
				t.Errorf("Alive(%d, %d) = true", tt.pid, tt.start)
			}
		})
	}

	c.stdin.Close()
	c.exited(t)
	t.Run("dead unreaped", func(t *testing.T) {
		if _, err := Start(pid); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Start of a zombie = %v, want fs.ErrNotExist", err)
		}
		if Alive(pid, c.start) {
			t.Error("a zombie is alive")
		}
		if !ExitsWithin(pid, c.start, time.Hour) {
			t.Error("ExitsWithin a zombie = false")
		}
	})
	c.cmd.Wait()
	t.Run("reaped", func(t *testing.T) {
		if _, err := Start(pid); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Start of a reaped pid = %v, want fs.ErrNotExist", err)
		}
		if err := Kill(t.Context(), pid, "gone"); err != nil {
			t.Errorf("Kill of a reaped pid = %v, want nil", err)
		}
	})
}

func TestExitsWithin(t *testing.T) {
	c := spawn(t, "exits")
	pid := c.cmd.Process.Pid
	if ExitsWithin(pid, c.start, 20*time.Millisecond) {
		t.Fatal("ExitsWithin a running child that does not exit = true")
	}
	exited := make(chan bool)
	go func() { exited <- ExitsWithin(pid, c.start, time.Minute) }()
	c.stdin.Close()
	deadline := time.After(30 * time.Second)
	select {
	case ok := <-exited:
		if !ok {
			t.Error("ExitsWithin a child that exits = false")
		}
	case <-deadline:
		t.Fatal("ExitsWithin did not return when the child exited")
	}
}

func TestKill(t *testing.T) {
	c := spawn(t, "killed")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := Kill(ctx, c.cmd.Process.Pid, "child"); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	// Kill returned: the child has exited, so this reaps at once.
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("child ended with %v, want killed by SIGKILL", err)
	}
}
