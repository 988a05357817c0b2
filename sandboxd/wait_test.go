package sandboxd

import (
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startExit starts a shell that exits with code on p.
func startExit(t *testing.T, p *procs, code string) (int, func() unix.WaitStatus) {
	t.Helper()
	pid, wait, err := p.start("/bin/sh", []string{"sh", "-c", "exit " + code}, nil, "/",
		[]uintptr{0, 1, 2}, &syscall.SysProcAttr{Setsid: true})
	if err != nil {
		t.Fatal(err)
	}
	return pid, wait
}

// TestWaitStatus: a command's waiter gets its exit status whoever reaps
// it, the waiter through the command's pidfd or the reaper (its sweep,
// or SIGCHLD), and the reaper wakes a waiter that polls a pidfd.
func TestWaitStatus(t *testing.T) {
	p, err := newProcs(0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()

	_, wait := startExit(t, p, "7")
	waitExit(t, wait, 7)

	// The reaper first: the command is reaped and its status handed over
	// before its waiter looks.
	pid, wait := startExit(t, p, "9")
	for deadline := time.Now().Add(10 * time.Second); p.running(pid); {
		if time.Now().After(deadline) {
			t.Fatal("the reaper did not reap the command")
		}
		p.reap() // as the sweep, or SIGCHLD, does
		time.Sleep(time.Millisecond)
	}
	waitExit(t, wait, 9)
}

// waitExit checks that wait returns, with exit code code.
func waitExit(t *testing.T, wait func() unix.WaitStatus, code int) {
	t.Helper()
	done := make(chan unix.WaitStatus, 1)
	go func() { done <- wait() }()
	select {
	case ws := <-done:
		if !ws.Exited() || ws.ExitStatus() != code {
			t.Errorf("status %v, want exit %d", ws, code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter of a command never woke")
	}
}

// TestReapOrphans: a child that no waiter waits for, as an orphan
// reparented to the daemon is, does not stay a zombie: the reaper's
// sweep (or, without pidfds, SIGCHLD) reaps it.
func TestReapOrphans(t *testing.T) {
	p, err := newProcs(0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(4 * reapEvery); ; time.Sleep(10 * time.Millisecond) {
		if _, err := readStat(pid); err != nil {
			return // reaped
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d still not reaped after %v", pid, 4*reapEvery)
		}
	}
}
