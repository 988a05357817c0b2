package sandboxd

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// procs starts commands and reaps every child of the daemon. The daemon
// is usually the sandbox's PID 1, so orphaned processes are reparented to
// it and must be reaped too: one reaper calls wait4(-1) and hands each
// status to whoever started that pid.
type procs struct {
	mu      sync.Mutex
	waiting map[int]chan unix.WaitStatus
	sigs    chan os.Signal
	done    chan struct{}
}

func newProcs() *procs {
	p := &procs{
		waiting: map[int]chan unix.WaitStatus{},
		sigs:    make(chan os.Signal, 1),
		done:    make(chan struct{}),
	}
	signal.Notify(p.sigs, unix.SIGCHLD)
	go p.reapLoop()
	return p
}

func (p *procs) close() {
	signal.Stop(p.sigs)
	close(p.done)
}

// start forks and execs a command. The returned channel receives its
// wait status. Holding mu across the fork makes the reaper, which takes mu
// to look up the pid, wait until the pid is registered.
func (p *procs) start(path string, argv, env []string, dir string, files []uintptr, sys *syscall.SysProcAttr) (int, <-chan unix.WaitStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: files, Sys: sys})
	if err != nil {
		return 0, nil, err
	}
	ch := make(chan unix.WaitStatus, 1)
	p.waiting[pid] = ch
	return pid, ch, nil
}

func (p *procs) reapLoop() {
	for {
		select {
		case <-p.done:
			return
		case <-p.sigs:
		}
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			if ws.Stopped() || ws.Continued() {
				continue
			}
			p.mu.Lock()
			ch := p.waiting[pid]
			delete(p.waiting, pid)
			p.mu.Unlock()
			if ch != nil {
				ch <- ws
			}
		}
	}
}

// killTree kills a command started in its own session: its process
// group, and any process still in its session. A process that started a
// session of its own escapes; the sandbox's lifetime bounds it.
func killTree(sid int) {
	_ = unix.Kill(-sid, unix.SIGKILL)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == sid {
			continue
		}
		if s, err := unix.Getsid(pid); err == nil && s == sid {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// lookPath finds a program the way a shell would, in the PATH of the
// command's environment rather than the daemon's. It returns "" when no
// executable file of that name exists.
func lookPath(name, dir string, env []string) string {
	if strings.Contains(name, "/") {
		p := name
		if !strings.HasPrefix(p, "/") {
			p = dir + "/" + p
		}
		if isExecutable(p) {
			return p
		}
		return ""
	}
	pathEnv := "/usr/local/bin:/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for d := range strings.SplitSeq(pathEnv, ":") {
		if d == "" {
			d = "."
		}
		if !strings.HasPrefix(d, "/") {
			d = dir + "/" + d
		}
		if p := d + "/" + name; isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	var st unix.Stat_t
	return unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0
}
