package sandboxd

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// procs starts commands and reaps every child of the daemon. The daemon
// is usually the sandbox's PID 1, so orphaned processes are reparented to
// it and must be reaped too: one reaper calls wait4(-1) and hands each
// status to whoever started that pid.
//
// Where the kernel has pidfds, a command's waiter reaps it through its
// pidfd, and the reaper sweeps for orphans every reapEvery: it does not
// listen for SIGCHLD, whose delivery to the signal goroutine, and the
// reaper's wake-up, cost every command two thread switches and a
// system call that found nothing to reap. An orphan that exits stays a
// zombie until the next sweep. Without pidfds the reaper reaps on
// SIGCHLD, and hands each command's status to its waiter.
type procs struct {
	mu      sync.Mutex
	waiting map[int]*waiter
	sigs    chan os.Signal // SIGCHLD, without pidfds
	sweep   *time.Ticker   // the sweeps for orphans, with pidfds
	done    chan struct{}
	// cmdAdj, when set, is the oom_score_adj commands get.
	cmdAdj []byte
	// forks takes the forks to run on the forking thread (forkLoop).
	forks chan func()
}

// newProcs starts the reaper and the thread that forks commands, into
// cgroup (a cgroup v1 tasks file) if it is not nil, and in a cgroup
// namespace of its own if cgroupNS is set.
func newProcs(cmdAdj int, cgroup *os.File, cgroupNS bool) (*procs, error) {
	p := &procs{
		waiting: map[int]*waiter{},
		sigs:    make(chan os.Signal, 1),
		done:    make(chan struct{}),
		forks:   make(chan func()),
	}
	if cmdAdj != 0 {
		p.cmdAdj = []byte(strconv.Itoa(cmdAdj))
	}
	errc := make(chan error, 1)
	go p.forkLoop(cgroup, cgroupNS, errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	var wake <-chan time.Time
	if hasPidfd() {
		p.sweep = time.NewTicker(reapEvery)
		wake = p.sweep.C
	} else {
		signal.Notify(p.sigs, unix.SIGCHLD)
	}
	go p.reapLoop(wake)
	return p, nil
}

// reapEvery is how often the reaper sweeps for orphans that exited,
// where commands are reaped through their pidfds: how long an exited
// orphan may stay a zombie, holding its pid.
const reapEvery = time.Second

// hasPidfd reports whether the kernel has pidfd_open (Linux 5.3).
func hasPidfd() bool {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// forkLoop forks every command from one OS thread, which lives as long
// as the daemon: a command's parent-death signal (SIGKILL) belongs to
// the thread that forked it, and the daemon's other threads may end (a
// goroutine that locked its thread and returns takes the thread with
// it, as file operations do: see asUser), which would kill the
// commands they happened to fork.
//
// With a cgroup, the thread moves into the commands' cgroup first: a
// process is born in the cgroup of the thread that forks it, so commands
// never run outside, and the rest of the daemon stays out. The thread is
// moved once, not around each fork: moving a thread takes a lock that
// waits for every CPU. It never leaves the cgroup, and ends with the
// goroutine, which never unlocks it.
//
// With cgroupNS the thread then enters a new cgroup namespace, rooted at
// the cgroups it is in: namespaces belong to threads, and commands are
// born in those of the thread that forks them.
func (p *procs) forkLoop(cgroup *os.File, cgroupNS bool, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Never the main thread: cgroup v1 charges the memory of the
		// whole daemon to the memory cgroup of its main thread. Held
		// here, it cannot be the thread another goroutine locks.
		other := make(chan error, 1)
		go p.forkLoop(cgroup, cgroupNS, other)
		err := <-other
		runtime.UnlockOSThread()
		errc <- err
		return
	}
	// 0 is the writing thread.
	if cgroup != nil {
		if _, err := cgroup.Write([]byte("0")); err != nil {
			errc <- fmt.Errorf("sandboxd: move the forking thread into the commands' cgroup: %w", err)
			return
		}
	}
	if cgroupNS {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			errc <- fmt.Errorf("sandboxd: cgroup namespace of the commands: %w", err)
			return
		}
	}
	errc <- nil
	for {
		select {
		case f := <-p.forks:
			f()
		case <-p.done:
			return
		}
	}
}

// forkExec runs syscall.ForkExec on the forking thread.
func (p *procs) forkExec(path string, argv []string, attr *syscall.ProcAttr) (pid int, err error) {
	done := make(chan struct{})
	select {
	case p.forks <- func() {
		pid, err = syscall.ForkExec(path, argv, attr)
		close(done)
	}:
	case <-p.done:
		return 0, errors.New("sandboxd: shutting down")
	}
	<-done
	return pid, err
}

func (p *procs) close() {
	signal.Stop(p.sigs)
	if p.sweep != nil {
		p.sweep.Stop()
	}
	close(p.done)
}

// start forks and execs a command, and returns a function that waits for
// its end and returns its wait status. Holding mu across the fork makes
// the reaper, which takes mu to look up the pid, wait until the pid is
// registered.
func (p *procs) start(path string, argv, env []string, dir string, files []uintptr, sys *syscall.SysProcAttr) (int, func() unix.WaitStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pid, err := p.forkExec(path, argv, &syscall.ProcAttr{Dir: dir, Env: env, Files: files, Sys: sys})
	// The command is made the likelier victim of the out-of-memory
	// killer as soon as it runs; raising another process's score needs
	// no privilege. The daemon never takes the command's score itself,
	// not even while it forks: an out-of-memory kill in that window
	// would pick the daemon, the largest process of the lot.
	if err == nil && p.cmdAdj != nil {
		if werr := writeProcFile(pid, "oom_score_adj", p.cmdAdj); werr != nil {
			fmt.Fprintf(os.Stderr, "sandboxd: oom_score_adj of command %d: %v\n", pid, werr)
		}
	}
	if err != nil {
		return 0, nil, err
	}
	w := &waiter{ch: make(chan unix.WaitStatus, 1)}
	p.waiting[pid] = w
	// A pidfd, where the kernel has them, is polled by the runtime's
	// poller: the command's end wakes its waiter directly. The reaper's
	// sweep may still reap the command first: it then closes the pidfd,
	// which wakes the waiter, and hands the status over on ch. Without a
	// pidfd (a kernel without them, or no descriptor left) the waiter
	// waits in wait4 or on ch.
	if fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		w.pidfd = os.NewFile(uintptr(fd), "pidfd")
	}
	return pid, func() unix.WaitStatus { return p.wait(pid, w) }, nil
}

// waiter is how the end of a command reaches the one waiting for it.
type waiter struct {
	ch    chan unix.WaitStatus // the status, from the reaper
	pidfd *os.File             // nil without one
}

// wait waits for the end of command pid, reaps it unless the reaper did,
// and returns its status.
func (p *procs) wait(pid int, w *waiter) unix.WaitStatus {
	if w.pidfd == nil {
		if p.sweep == nil {
			return <-w.ch // the reaper reaps on SIGCHLD
		}
		// Reaped by this wait4, or by a sweep, which hands it over.
		var ws unix.WaitStatus
		got, err := unix.Wait4(pid, &ws, 0, nil)
		for err == unix.EINTR {
			got, err = unix.Wait4(pid, &ws, 0, nil)
		}
		if got == pid && err == nil {
			p.mu.Lock()
			delete(p.waiting, pid)
			p.mu.Unlock()
			return ws
		}
		return <-w.ch
	}
	defer w.pidfd.Close()
	rc, err := w.pidfd.SyscallConn()
	if err != nil {
		return <-w.ch
	}
	// Readable once the command has exited; waitid with WNOWAIT says so
	// without reaping it (ECHILD: the reaper has). It fails once the
	// reaper has closed the pidfd.
	_ = rc.Read(func(fd uintptr) bool {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		return err != nil || info.Signo != 0
	})
	p.mu.Lock()
	if p.waiting[pid] == w {
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); got == pid && err == nil {
			delete(p.waiting, pid)
			p.mu.Unlock()
			return ws
		}
	}
	p.mu.Unlock()
	return <-w.ch // the reaper reaped it, and hands its status over
}

// writeProcFile writes b to /proc/PID/name in three system calls: an
// os.File would also try the poller and set the descriptor's flags, on
// every command.
func writeProcFile(pid int, name string, b []byte) error {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/"+name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, b)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// running reports whether pid is a command the daemon started and has
// not yet reaped.
func (p *procs) running(pid int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.waiting[pid]
	return ok
}

// reapLoop reaps on SIGCHLD, or on wake's ticks.
func (p *procs) reapLoop(wake <-chan time.Time) {
	for {
		select {
		case <-p.done:
			return
		case <-p.sigs:
		case <-wake:
		}
		p.reap()
	}
}

// reap reaps every child that has exited, and hands the status of a
// command to its waiter.
func (p *procs) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		p.mu.Lock()
		w := p.waiting[pid]
		delete(p.waiting, pid)
		p.mu.Unlock()
		if w != nil {
			w.ch <- ws
			if w.pidfd != nil {
				w.pidfd.Close() // wakes the waiter, if it polls it
			}
		}
	}
}

// procStat is what the daemon reads of a process in /proc.
type procStat struct {
	pid, ppid, pgrp, sid int
	state                byte   // R, S, D, T, t, Z...
	start                uint64 // clock ticks after boot
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name, in parentheses, may hold anything; the fields
	// after the last ')' are plain. fields[0] is field 3 of the line.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 20 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	ppid, _ := strconv.Atoi(fields[1])
	pgrp, _ := strconv.Atoi(fields[2])
	sid, _ := strconv.Atoi(fields[3])
	start, _ := strconv.ParseUint(fields[19], 10, 64)
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, sid: sid, state: fields[0][0], start: start}, nil
}

func allProcs() []procStat {
	entries, _ := os.ReadDir("/proc")
	var ps []procStat
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if st, err := readStat(pid); err == nil {
			ps = append(ps, st)
		}
	}
	return ps
}

// signal sends sig to a command started in its own session, unless it
// has been reaped (its pid may then be another's): to its process group,
// then to each process of its session in another group. Each process
// gets it once: a second copy would run a shell's trap twice.
func (p *procs) signal(pid int, sig unix.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.waiting[pid]; !ok {
		return
	}
	_ = unix.Kill(-pid, sig)
	for _, st := range allProcs() {
		if st.sid == pid && st.pgrp != pid {
			_ = unix.Kill(st.pid, sig)
		}
	}
}

// killTree kills a command started in its own session: its process
// group and every process still in its session. With escapees set it
// also kills the sessions that processes started for themselves (with
// setsid) after the command began, which only it can have started when
// it is the only command running.
func killTree(sid int, since uint64, escapees bool, running func(pid int) bool) {
	_ = unix.Kill(-sid, unix.SIGKILL)
	doomed := map[int]bool{sid: true}
	procs := allProcs()
	if escapees {
		self := os.Getpid()
		parent := make(map[int]int, len(procs))
		for _, p := range procs {
			parent[p.pid] = p.ppid
		}
		for _, p := range procs {
			if p.sid == p.pid && p.start >= since && !running(p.pid) && descends(p.pid, self, parent) {
				doomed[p.sid] = true
			}
		}
	}
	for _, p := range procs {
		if doomed[p.sid] {
			_ = unix.Kill(p.pid, unix.SIGKILL)
		}
	}
}

// descends reports whether pid descends from ancestor, by the parents
// in parent (a process that has lost its own parent is its subreaper's,
// or PID 1's).
func descends(pid, ancestor int, parent map[int]int) bool {
	for range len(parent) + 1 {
		if pid == ancestor {
			return true
		}
		pp, ok := parent[pid]
		if !ok || pp == pid {
			return false
		}
		pid = pp
	}
	return false
}

// isSubreaper reports whether the daemon is the subreaper of its
// descendants (PR_SET_CHILD_SUBREAPER): orphans become its children.
func isSubreaper() bool {
	var v int32
	err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0)
	return err == nil && v != 0
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
