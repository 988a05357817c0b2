package runkey

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// supervise runs the command of entry, whose lock it inherited on
// supervisorLock, and writes its status. Its exit code is read by no one:
// the status is its result.
func supervise(entry string, opt options) int {
	lock := os.NewFile(supervisorLock, fileLock)
	defer lock.Close() // held, with the lock, until the status is written
	syscall.CloseOnExec(supervisorLock)
	st := runCommand(entry, opt)
	if err := writeStatus(entry, st); err != nil {
		return 1
	}
	return 0
}

func runCommand(entry string, opt options) status {
	st := status{Cap: opt.cap}
	var outs [2]*capped
	for i, name := range []string{fileStdout, fileStderr} {
		f, err := os.OpenFile(filepath.Join(entry, name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			st.Error = fmt.Sprintf("the supervisor: %v", err)
			return st
		}
		defer f.Close()
		outs[i] = &capped{f: f, room: opt.cap}
	}
	ctx := context.Background()
	if opt.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opt.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, opt.argv[0], opt.argv[1:]...)
	cmd.Stdout, cmd.Stderr = outs[0], outs[1]
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Written before the command can start: an entry without it never ran
	// its command.
	if err := os.WriteFile(filepath.Join(entry, fileStarted), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		st.Error = fmt.Sprintf("the supervisor: %v", err)
		return st
	}
	if err := cmd.Start(); err != nil {
		st.StartError = fmt.Sprintf("cannot start %q: %v", opt.argv[0], err)
		st.NotFound = errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
		return st
	}
	err := cmd.Wait()
	st.TimedOut = ctx.Err() != nil
	for i, o := range outs {
		st.Dropped[i] = o.dropped
		o.f.Sync()
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		st.Signal = int(ws.Signal())
	case cmd.ProcessState.Exited():
		code := cmd.ProcessState.ExitCode()
		st.Exit = &code
	default:
		st.Error = fmt.Sprintf("waiting for the command: %v", err)
	}
	return st
}

// capped writes the first room bytes to f and counts the rest, never
// failing, so that the command never sees its output refused.
type capped struct {
	f       *os.File
	room    int64
	dropped int64
}

func (c *capped) Write(p []byte) (int, error) {
	keep := min(int64(len(p)), c.room)
	if keep > 0 {
		n, _ := c.f.Write(p[:keep])
		c.room -= int64(n)
		c.dropped += keep - int64(n)
	}
	c.dropped += int64(len(p)) - keep
	return len(p), nil
}
