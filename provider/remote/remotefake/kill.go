package remotefake

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// KillAll kills every process of the machine but the two that keep it
// up (its first process and the idle one it waits on): what a VM that
// stops loses, while its files stay. A service's fake stops a machine so
// and starts it again by running commands in it anew. It returns once
// no other process is left, or fails if some outlive ctx.
func (m *Machine) KillAll(ctx context.Context) error {
	if err := m.check(false); err != nil {
		return err
	}
	ns, err := os.Readlink("/proc/" + strconv.Itoa(m.pid) + "/ns/pid")
	if err != nil {
		return fmt.Errorf("remotefake: the pid namespace of machine %q: %w", m.id, err)
	}
	if err := m.alive(); err != nil {
		return err
	}
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		pids, err := m.HostPIDs()
		if err != nil {
			return err
		}
		left := 0
		for _, p := range pids {
			if p == m.pid {
				continue
			}
			killed, err := killInNS(p, ns)
			if err != nil {
				return fmt.Errorf("remotefake: kill process %d of machine %q: %w", p, m.id, err)
			}
			if killed {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remotefake: kill the processes of machine %q: %d left: %w", m.id, left, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// killInNS sends SIGKILL to host pid p if it is in the pid namespace ns
// and is not the machine's idle process; it says whether p was one to
// kill. The pidfd pins p while it is looked at, so that no later process
// with its pid is killed instead.
func killInNS(p int, ns string) (bool, error) {
	fd, err := unix.PidfdOpen(p, 0)
	if errors.Is(err, unix.ESRCH) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	dir := "/proc/" + strconv.Itoa(p)
	pns, err := os.Readlink(dir + "/ns/pid")
	if err != nil || pns != ns {
		return false, nil // gone, or not the machine's any more
	}
	// The idle process is the one whose command names the FIFO it reads.
	if cmdline, err := os.ReadFile(dir + "/cmdline"); err == nil && strings.Contains(string(cmdline), "/dev/remotefake-idle") && nsPID(p) < 100 {
		return false, nil
	}
	if err := unix.PidfdSendSignal(fd, syscall.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return false, err
	}
	return true, nil
}
