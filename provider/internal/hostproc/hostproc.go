// Package hostproc follows the processes a provider starts on the host:
// a sandbox's daemon, or the process that holds a sandbox (runsc's
// sentry). A process is named by its pid and its start time, which tells
// it apart from a later process that reuses the pid.
package hostproc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Start reads when process pid started, in clock ticks since boot, or
// reports fs.ErrNotExist when it does not exist (or is dead, not yet
// reaped).
func Start(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces and parentheses;
	// the fields after the last ')' are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := strings.Fields(s[i+1:])
	// starttime is field 22 of the line; fields[0] here is field 3.
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fs.ErrNotExist // dead, not yet reaped
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// Alive reports whether the process pid that started at start still
// runs.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	s, err := Start(pid)
	return err == nil && s == start
}

// ExitsWithin reports whether the process pid that started at start is
// gone, or goes within d.
func ExitsWithin(pid int, start uint64, d time.Duration) bool {
	if !Alive(pid, start) {
		return true
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return errors.Is(err, unix.ESRCH)
	}
	defer unix.Close(pidfd)
	if !Alive(pid, start) { // the pid may have been reused before the open
		return true
	}
	n, _ := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, int(d.Milliseconds()))
	return n > 0
}

// Kill kills process pid and returns when it is gone, or when ctx ends.
// what names the process in errors ("daemon").
func Kill(ctx context.Context, pid int, what string) error {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %s %d: %w", what, pid, err)
	}
	for {
		// A pidfd polls readable when its process has exited.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 10)
		if n > 0 {
			return nil
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s %d did not exit: %w", what, pid, ctx.Err())
		}
	}
}
