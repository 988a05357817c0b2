package sandboxd

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"
)

// The lease ties a sandbox to the host that serves it. Every request to
// the daemon is contact, when it comes and when it ends. A request in
// flight is not: a command's stream whose caller was killed goes on until
// the command writes (the stream reads no more of its request, so the
// connection's end goes unseen), and a host that holds a sandbox renews
// it through long commands too. When no contact has come for the
// lease's length, the daemon stops every other process of the sandbox
// with SIGSTOP: they keep their memory and the workspace, and use no
// CPU, until the next contact continues them. A Pause is the same stop,
// held until Resume whatever contact comes. The daemon itself is never
// stopped, so it still ends the sandbox at its lifetime, host or no host.
//
// A stopped process cannot continue itself, nor another: the stop is
// done in passes until one finds every process stopped, and repeated
// every sweepEvery while it lasts, so that no process a fork was making
// during a pass escapes. A daemon that is not PID 1 (in tests) records
// the processes it stopped with their start times, and continues only
// those still the same processes.

// sweepEvery is how often a stop is made again while it holds.
const sweepEvery = time.Second

// Bounds of one stop: passes until one finds nothing to stop, at most
// maxStopPasses of them, passGap apart (the kernel takes a moment to
// stop a process signalled).
const (
	maxStopPasses = 50
	passGap       = 2 * time.Millisecond
)

type lease struct {
	self int // the daemon's pid: the sandbox's processes are its descendants
	kick chan struct{}

	mu      sync.Mutex
	length  time.Duration // zero: no lease
	last    time.Time     // when the last contact ended
	paused  bool          // by Pause: only Resume continues
	idle    bool          // by the lease: the next contact continues
	stopped []procStat    // what the daemon stopped, in order
}

func newLease(self int) *lease {
	return &lease{self: self, kick: make(chan struct{}, 1), last: time.Now()}
}

// set gives the lease its length; zero means none.
func (l *lease) set(d time.Duration) {
	l.mu.Lock()
	l.length, l.last = max(d, 0), time.Now()
	l.mu.Unlock()
	l.wake()
}

func (l *lease) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// begin marks a request's start, continuing the sandbox if the lease
// had stopped it. It reports whether the sandbox is paused.
func (l *lease) begin() (paused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
	if l.idle && !l.paused {
		l.idle = false
		l.continueAll()
	}
	return l.paused
}

// end marks a request's end.
func (l *lease) end() {
	l.mu.Lock()
	l.last = time.Now()
	l.mu.Unlock()
}

// setPaused pauses or resumes the sandbox. Resuming also ends a stop of
// the lease: it is contact.
func (l *lease) setPaused(pause bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.paused = pause
	if pause {
		l.stopAll()
		return
	}
	l.idle = false
	l.continueAll()
}

func (l *lease) isPaused() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused
}

// run stops the sandbox when its lease runs out and sweeps while it is
// stopped, until done is closed.
func (l *lease) run(done <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		t.Reset(l.step())
		select {
		case <-done:
			return
		case <-l.kick:
		case <-t.C:
		}
	}
}

// step does what is due now and says how long to wait for the next.
func (l *lease) step() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.paused && !l.idle && l.length > 0 {
		left := time.Until(l.last.Add(l.length))
		if left > 0 {
			return left
		}
		l.idle = true
	}
	if l.paused || l.idle {
		l.stopAll()
		return sweepEvery
	}
	return time.Hour
}

// stopAll stops every descendant of the daemon, in passes until one
// finds all of them stopped. The caller holds l.mu.
//
// The daemon that is the first process of its PID namespace, as in
// every sandbox, stops them all at once with kill(-1): the kernel
// signals every process of the namespace but the daemon, and a fork
// under way is begun again with the signal pending, so none escapes
// between a listing and a signal. That matters beyond speed: a process
// that ends while another of its process group is stopped has gVisor
// send the group SIGHUP and SIGCONT (as Linux does only when the group
// is orphaned by it), which kills what does not ignore SIGHUP.
func (l *lease) stopAll() {
	all := l.self == 1
	for range maxStopPasses {
		if all {
			_ = unix.Kill(-1, unix.SIGSTOP)
		}
		again := false
		for _, p := range l.descendants() {
			// Stopped already (by the daemon, or by the sandbox's own
			// hand, which it would not want undone), or dead.
			if p.state == 'T' || p.state == 't' || p.state == 'Z' || p.state == 'X' {
				continue
			}
			if all {
				again = true // on its way to stopping
				continue
			}
			if unix.Kill(p.pid, unix.SIGSTOP) == nil && !l.recorded(p) {
				l.stopped = append(l.stopped, p)
			}
			again = true
		}
		if !again {
			return
		}
		time.Sleep(passGap)
	}
}

func (l *lease) recorded(p procStat) bool {
	return slices.ContainsFunc(l.stopped, func(q procStat) bool { return q.pid == p.pid && q.start == p.start })
}

// continueAll continues what the daemon stopped: as PID 1, everything
// at once (see stopAll); otherwise what it recorded, the last stopped
// first (children before the parents that would see them stopped),
// skipping pids that are no longer the process stopped. The caller
// holds l.mu.
func (l *lease) continueAll() {
	if l.self == 1 {
		_ = unix.Kill(-1, unix.SIGCONT)
		return
	}
	for _, p := range slices.Backward(l.stopped) {
		if st, err := readStat(p.pid); err == nil && st.start == p.start {
			_ = unix.Kill(p.pid, unix.SIGCONT)
		}
	}
	l.stopped = nil
}

// descendants lists the daemon's descendants, parents before children.
// The daemon being the first process of the sandbox's PID namespace,
// they are every process of the sandbox but itself.
func (l *lease) descendants() []procStat {
	children := map[int][]procStat{}
	for _, p := range allProcs() {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []procStat
	queue := []int{l.self}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// leaseRoutes are served while the sandbox is paused; every other
// route then answers ErrPaused.
var leaseRoutes = []string{routeHealth, routeLease, routePause, routeResume}

// contact wraps the daemon's routes: every request renews the lease.
func (s *Server) contact(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paused := s.lease.begin()
		defer s.lease.end()
		if paused && !slices.Contains(leaseRoutes, r.URL.Path) {
			writeError(w, errdefs.Errorf(errdefs.SandboxPaused, "sandbox paused; resume it first"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// SetLease gives the daemon its lease: with no request for d, it stops
// the sandbox's other processes until the next. Zero means no lease.
func (s *Server) SetLease(d time.Duration) { s.lease.set(d) }

func (s *Server) handleRenew(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handlePause(w http.ResponseWriter, _ *http.Request) {
	s.lease.setPaused(true)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleResume(w http.ResponseWriter, _ *http.Request) {
	s.lease.setPaused(false)
	w.WriteHeader(http.StatusNoContent)
}

// Hold runs f with the sandbox's stop as it is: while f runs the daemon
// neither stops nor continues the sandbox's processes. held says whether
// they are stopped (by the lease or by Pause); f must leave them as it
// found them. A provider's daemon that stops processes for its own ends
// (gVisor's memory accounting) does it within Hold, and rests while
// held: nothing stopped can grow.
func (s *Server) Hold(f func(held bool)) {
	s.lease.mu.Lock()
	defer s.lease.mu.Unlock()
	f(s.lease.paused || s.lease.idle)
}
