package idlock

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/testkit"
)

// The test binary, re-executed with these set, is a process that takes
// one lock: it says "locked" once it holds it, and releases it when its
// stdin closes (or when it dies).
const (
	envFile = "BERTH_IDLOCK_TEST_FILE"
	envID   = "BERTH_IDLOCK_TEST_ID"
)

func TestMain(m *testing.M) {
	if file := os.Getenv(envFile); file != "" {
		unlock, err := Lock(file, os.Getenv(envID))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println("locked")
		_, _ = io.Copy(io.Discard, os.Stdin)
		unlock()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holder is a re-executed test binary that takes the lock of id.
type holder struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	locked chan error // one value: nil once it says it holds the lock
}

func startHolder(t *testing.T, file, id string) *holder {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envFile+"="+file, envID+"="+id)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &holder{cmd: cmd, stdin: stdin, locked: make(chan error, 1)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "locked\n" {
			err = fmt.Errorf("said %q", line)
		}
		h.locked <- err
	}()
	return h
}

// waitLocked waits until h says it holds its lock.
func (h *holder) waitLocked(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-h.locked:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: not locked within a minute", what)
	}
}

// locks counts the kernel's open file description locks on file, held
// and waited for (/proc/locks).
func locks(t *testing.T, file string) (held, waiting int) {
	t.Helper()
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	ino := fmt.Sprintf(":%d ", st.Sys().(*syscall.Stat_t).Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "OFDLCK") || !strings.Contains(line, ino) {
			continue
		}
		if strings.Contains(line, "->") {
			waiting++
		} else {
			held++
		}
	}
	return held, waiting
}

// TestLockAcrossProcesses: of two processes that lock one id, one holds
// the lock and the other waits in the kernel until it is released; a
// holder that dies (SIGKILL: nothing of its own runs) releases it.
func TestLockAcrossProcesses(t *testing.T) {
	file := t.TempDir() + "/lock"
	if err := Create(file); err != nil {
		t.Fatal(err)
	}
	first := startHolder(t, file, "sb-1")
	first.waitLocked(t, "the first process")
	second := startHolder(t, file, "sb-1")
	testkit.Eventually(t, "the second process to wait for the lock", time.Minute, func() bool {
		_, waiting := locks(t, file)
		return waiting == 1
	})
	select {
	case err := <-second.locked:
		t.Fatalf("the second process took a held lock (%v)", err)
	default:
	}
	if held, _ := locks(t, file); held != 1 {
		t.Errorf("%d locks held, want 1", held)
	}

	// The first crashes: the kernel releases its lock, and the second
	// takes it.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	second.waitLocked(t, "the second process, once the first died")
	if held, waiting := locks(t, file); held != 1 || waiting != 0 {
		t.Errorf("%d locks held and %d waiting, want 1 and 0", held, waiting)
	}

	// Released on purpose, it is free for this process.
	if err := second.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("the second process: %v", err)
	}
	unlock, err := Lock(file, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	unlock()
}

// TestLockWithinProcess: each Lock opens its own description, so two
// callers in one process exclude each other too.
func TestLockWithinProcess(t *testing.T) {
	file := t.TempDir() + "/lock"
	if err := Create(file); err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(file, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := Lock(file, "sb-1")
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		got <- u
	}()
	testkit.Eventually(t, "the second caller to wait for the lock", time.Minute, func() bool {
		_, waiting := locks(t, file)
		return waiting == 1
	})
	select {
	case <-got:
		t.Fatal("a second caller took a held lock")
	default:
	}
	unlock()
	(<-got)()
}
