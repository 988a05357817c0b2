package remotefake

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
)

// Machine is one machine of a farm: a running container. Its methods are
// safe for concurrent use.
type Machine struct {
	farm      *Farm
	id        string
	container string
	pid       int    // the host pid of the container's first process
	uid       int    // of its user and of the user's group
	user      string // its user's name
	env       map[string]string

	ops sync.Mutex // serializes Pause, Resume and Destroy

	mu        sync.Mutex
	initFD    int // a pidfd of pid, -1 once destroyed
	paused    bool
	ending    bool // Destroy is removing the container
	destroyed bool
}

// ID is the fake service's id of the machine.
func (m *Machine) ID() string { return m.id }

// Env is the machine's base environment, as Create was given it.
func (m *Machine) Env() map[string]string { return maps.Clone(m.env) }

// UID is the uid of the machine's user on this host: also the gid of
// its group.
func (m *Machine) UID() int { return m.uid }

// UserName is the name of the machine's unprivileged user (and of its
// group), as MachineOptions gave it: UserName unless said otherwise.
func (m *Machine) UserName() string { return m.user }

// Home is the home directory of the machine's user, which it owns.
func (m *Machine) Home() string { return "/home/" + m.user }

// Container is the id of the machine's Docker container.
func (m *Machine) Container() string { return m.container }

// Paused says whether the machine is paused.
func (m *Machine) Paused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

func (m *Machine) setEnding(b bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ending = b
}

// gone says whether the machine is destroyed or being destroyed.
func (m *Machine) gone() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ending || m.destroyed
}

// check fails when the machine is destroyed, or paused unless paused is
// allowed.
func (m *Machine) check(pausedOK bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.destroyed:
		return fmt.Errorf("%w: remotefake: machine %q is destroyed", errdefs.ErrNotFound, m.id)
	case m.paused && !pausedOK:
		return fmt.Errorf("%w: remotefake: machine %q is paused", errdefs.ErrSandboxPaused, m.id)
	}
	return nil
}

// Pause freezes every process of the machine (docker pause): they get
// no CPU and keep their memory.
func (m *Machine) Pause(ctx context.Context) error {
	m.ops.Lock()
	defer m.ops.Unlock()
	if err := m.check(true); err != nil || m.Paused() {
		return err
	}
	// runc gives up freezing a cgroup whose processes keep forking or
	// sit in the kernel ("unable to freeze"), which a busy machine's may
	// for a moment: a VM's pause, which the fakes stand for, does not.
	for attempt := 1; ; attempt++ {
		_, err := m.farm.docker.ContainerPause(ctx, m.container, client.ContainerPauseOptions{})
		if err == nil {
			break
		}
		if attempt == 5 || !strings.Contains(err.Error(), "unable to freeze") {
			return fmt.Errorf("remotefake: pause machine %q: %v", m.id, oneLine(err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remotefake: pause machine %q: %v", m.id, oneLine(err))
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
	m.mu.Lock()
	m.paused = true
	m.mu.Unlock()
	return nil
}

// Resume thaws a paused machine.
func (m *Machine) Resume(ctx context.Context) error {
	m.ops.Lock()
	defer m.ops.Unlock()
	if err := m.check(true); err != nil || !m.Paused() {
		return err
	}
	if _, err := m.farm.docker.ContainerUnpause(ctx, m.container, client.ContainerUnpauseOptions{}); err != nil {
		return fmt.Errorf("remotefake: resume machine %q: %v", m.id, oneLine(err))
	}
	m.mu.Lock()
	m.paused = false
	m.mu.Unlock()
	return nil
}

// Destroy removes the machine's container with everything in it. A
// destroyed machine is not an error.
func (m *Machine) Destroy(ctx context.Context) error {
	m.ops.Lock()
	defer m.ops.Unlock()
	m.mu.Lock()
	done := m.destroyed
	m.mu.Unlock()
	if done {
		return nil
	}
	m.setEnding(true)
	if err := m.farm.remove(ctx, m.container); err != nil {
		m.setEnding(false)
		return err
	}
	m.mu.Lock()
	m.destroyed = true
	if m.initFD >= 0 {
		unix.Close(m.initFD)
		m.initFD = -1
	}
	m.mu.Unlock()
	m.farm.forget(m)
	m.farm.log.Debug("remotefake: machine destroyed", "id", m.id)
	return nil
}

// HostPIDs lists the machine's processes as host pids: those of its
// container's cgroup.
func (m *Machine) HostPIDs() ([]int, error) {
	if err := m.check(true); err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(m.pid) + "/cgroup")
	if err != nil {
		return nil, fmt.Errorf("remotefake: the cgroup of machine %q: %w", m.id, err)
	}
	var v1, v2 string
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2 = parts[2]
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c == "pids" {
				v1 = parts[2]
			}
		}
	}
	procs := "/sys/fs/cgroup" + v2 + "/cgroup.procs"
	if v1 != "" {
		procs = "/sys/fs/cgroup/pids" + v1 + "/cgroup.procs"
	} else if v2 == "" {
		return nil, fmt.Errorf("remotefake: no cgroup of machine %q", m.id)
	}
	if err := m.alive(); err != nil {
		return nil, err
	}
	b, err = os.ReadFile(procs)
	if err != nil {
		return nil, fmt.Errorf("remotefake: the processes of machine %q: %w", m.id, err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// alive checks that the container's first process is still the one
// m.pid named when the machine was made: called after opening a file of
// /proc/<pid>, it proves that the file is the machine's.
func (m *Machine) alive() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.initFD < 0 || unix.PidfdSendSignal(m.initFD, 0, nil, 0) != nil {
		return fmt.Errorf("%w: remotefake: the container of machine %q has ended", errdefs.ErrSandboxLost, m.id)
	}
	return nil
}

// openProc opens /proc/<pid>/<name> of the machine's first process.
func (m *Machine) openProc(name string, flags int) (int, error) {
	if err := m.check(true); err != nil {
		return -1, err
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(m.pid)+"/"+name, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: remotefake: machine %q: open %s: %v", errdefs.ErrSandboxLost, m.id, name, err)
	}
	if err := m.alive(); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
