package gvisorinit

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/daemonmem"
)

// oomKiller enforces a sandbox's memory limit. gVisor's sentry keeps the
// memory of all the sandbox's processes, and the host's cgroup counts it
// whole: reached, the host's limit kills the sentry and with it the
// sandbox (the sentry's memory cgroup files are stubs, so nothing in it
// limits its processes). So the daemon counts what commands hold and,
// past the sandbox's limit, kills the command that holds the most, as
// the kernel's killer would, and counts a kill, which sandboxd reports
// as the command running out of memory. It counts:
//
//   - gVisor's count of the sandbox's memory (anonymous memory, tmpfs,
//     page cache, mappings), polled;
//   - each process's cost to the host (processOverhead);
//   - the kernel buffers processes hold (pipes, sockets), which live in
//     the sentry's own heap, out of gVisor's count: scanned
//     (scanBuffers), which is slow next to how fast a pipe fills;
//   - and, where the provider passed it, the host cgroup's own count
//     (memory.stat), which sees all of it at once: memory the host
//     counts beyond what the daemon knows of (the sentry's own,
//     learnt at rest) has the daemon stop every command (SIGSTOP), scan
//     the buffers again, kill the one that holds the most if the sandbox
//     is past its limit or the host's limit is near, and resume the
//     rest.
//
// The host's limit has headroom above the sandbox's for the sentry's own
// memory (see hostMemory).
type oomKiller struct {
	limit     int64
	hostLimit int64    // the host cgroup's limit
	host      *os.File // the host cgroup's memory.stat, or nil
	self      int
	kills     atomic.Int64
	looking   atomic.Bool // a look is under way (see boundedLook)
	// hold is the daemon's sandboxd.Server.Hold: while the lease or a
	// Pause holds the sandbox stopped, nothing in it can grow, and the
	// killer rests; its own stops must not continue what they hold.
	hold func(func(held bool))

	// The last count of kernel buffers. A scanner counts them in the
	// background, at most half the time (a scan looks at every
	// descriptor), every scanEvery (its nanoseconds), and says when they
	// grew fast; a look counts them with commands stopped, which a
	// background count begun before it must not undo (looks counts
	// them).
	mu        sync.Mutex
	bufs      buffers
	looks     int
	lastLook  time.Time
	scanEvery atomic.Int64
	grew      atomic.Bool
	// own is the sentry's own memory, as far as the daemon knows: the
	// host's count less the sandbox's, at its lowest since the last
	// look; rest is its lowest ever, the sentry at rest; -1 before the
	// first look.
	own, rest int64
	// The last kill's session, and the count of used memory at or
	// under which its memory is back (see settle).
	victim int
	below  int64
}

func (o *oomKiller) count() (int64, error) { return o.kills.Load(), nil }

// Polling intervals: short once usage is past half the limit, since
// a process can take hundreds of MiB a second (a pipe fills at a GiB a
// second).
const (
	oomPollIdle = 25 * time.Millisecond
	oomPollBusy = 2 * time.Millisecond
	// scanEvery is the shortest time between two scans of kernel
	// buffers (scanEveryHost with the host's count to go by); a scan
	// that takes longer waits as long as it took.
	scanEvery     = 20 * time.Millisecond
	scanEveryHost = time.Second
	// ownSlack is how much the sentry's own memory may grow before the
	// daemon looks for what grew it.
	ownSlack = 16 << 20
	// lookEvery is how often commands holding much in kernel buffers
	// are stopped to count them.
	lookEvery = 50 * time.Millisecond
	// hostMargin: the host's count this close to the host's limit has
	// the daemon kill even when the sandbox's count is under its own.
	hostMargin = 32 << 20
)

func (o *oomKiller) run() {
	if o.limit <= 0 {
		return
	}
	o.own, o.rest = -1, -1
	o.scanEvery.Store(int64(scanEvery))
	go o.scanner()
	for {
		if o.resting() {
			time.Sleep(oomPollIdle)
			continue
		}
		// With the host's count to go by, scans are for when it shows
		// more than the daemon knows of; without, they are all there is.
		// But a sentry that holds memory it freed (its collector has not
		// run yet) reuses it out of the host's sight.
		every := scanEvery
		if o.host != nil && o.own <= o.rest+ownSlack {
			every = scanEveryHost
		}
		o.scanEvery.Store(int64(every))
		// Buffers that grow fast between two scans fill faster than a
		// scan can follow: commands are stopped for the next, and
		// looks follow each other while they hold much.
		growing := o.grew.Swap(false) || o.holdsMuch() && time.Since(o.lastLook) >= lookEvery
		used, err := o.used()
		wait := oomPollIdle
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "memory usage: %v\n", err)
		case used > o.limit-daemonmem.Reserve(o.limit) || growing || o.hostSeesMore(used):
			if o.stopAndLook() {
				o.settle()
				continue
			}
			wait = oomPollBusy
		case used > o.limit/2:
			wait = oomPollBusy
		}
		time.Sleep(wait)
	}
}

// used is what commands hold: all but the daemon's own memory, which has
// a reserve of its own so that it can serve when commands have taken all
// they can.
func (o *oomKiller) used() (int64, error) {
	used, err := memoryUsed()
	o.mu.Lock()
	bufs := o.bufs.total
	o.mu.Unlock()
	return used + processes()*processOverhead - daemonmem.Self() + bufs, err
}

// hostSeesMore reports whether the host counts more memory than the
// sandbox's count used explains, beyond what the sentry holds of its
// own; it learns the latter, at its lowest, as it goes.
func (o *oomKiller) hostSeesMore(used int64) bool {
	if o.host == nil {
		return false
	}
	host, err := o.hostUsed()
	if err != nil {
		fmt.Fprintf(os.Stderr, "host memory usage: %v\n", err)
		return false
	}
	own := host - used
	if o.own < 0 || own < o.own {
		o.own = own
	}
	if o.rest < 0 || own < o.rest {
		o.rest = own
	}
	return own > o.own+ownSlack || host > o.hostLimit-hostMargin
}

// stopAndLook stops every command, counts the kernel buffers again and
// kills the command that holds the most if the sandbox is past its limit
// or the host's limit is near; otherwise what the host sees beyond the
// sandbox's count is the sentry's own. It reports whether it killed.
func (o *oomKiller) stopAndLook() (killed bool) {
	if o.hold == nil {
		return o.boundedLook()
	}
	o.hold(func(held bool) {
		if !held {
			killed = o.boundedLook()
		}
	})
	return killed
}

// lookTimeout bounds how long a look may hold the sandbox's stop: a look
// reads every process's descriptors, and a process exiting under memory
// pressure may keep one of those reads waiting. The daemon must go on
// serving (every request waits for the hold), and no command may stay
// stopped.
const lookTimeout = 2 * time.Second

// boundedLook is look, given up after lookTimeout: the commands are
// continued, and no other look starts until that one has ended.
func (o *oomKiller) boundedLook() bool {
	if o.looking.Load() {
		return false
	}
	o.looking.Store(true)
	done := make(chan bool, 1)
	go func() {
		defer o.looking.Store(false)
		done <- o.look()
	}()
	select {
	case killed := <-done:
		return killed
	case <-time.After(lookTimeout):
		fmt.Fprintf(os.Stderr, "memory: a look took more than %v; commands continued\n", lookTimeout)
		go o.signalAll(unix.SIGCONT)
		return false
	}
}

// resting reports whether the sandbox is held stopped.
func (o *oomKiller) resting() (held bool) {
	if o.hold != nil {
		o.hold(func(h bool) { held = h })
	}
	return held
}

// look is stopAndLook, with nothing else stopping or continuing the
// sandbox's processes meanwhile.
func (o *oomKiller) look() bool {
	o.signalAll(unix.SIGSTOP)
	defer o.signalAll(unix.SIGCONT)
	o.rescan()
	o.mu.Lock()
	o.lastLook = time.Now()
	o.mu.Unlock()
	used, err := o.used()
	if err != nil {
		return false
	}
	if used > o.limit-daemonmem.Reserve(o.limit) {
		return o.kill(used)
	}
	if o.host == nil {
		return false
	}
	host, err := o.hostUsed()
	if err != nil {
		return false
	}
	if host > o.hostLimit-hostMargin {
		return o.kill(used)
	}
	o.own = host - used
	return false
}

// settleTimeout bounds how long the killer waits, after a kill, for the
// memory of what it killed to come back.
const settleTimeout = time.Second

// kill kills the command that holds the most (killLargest), used being
// what commands held, and notes what settle waits for.
func (o *oomKiller) kill(used int64) bool {
	victim, held := o.killLargest()
	if victim < 0 {
		return false
	}
	o.mu.Lock()
	o.victim, o.below = victim, min(o.limit-daemonmem.Reserve(o.limit), used-held/2)
	o.mu.Unlock()
	return true
}

// settle waits, with the commands running, until the processes of the
// last kill are gone and gVisor's count has given back their memory:
// the count lags the kill, and a look before it caught up would take
// the next command, however small, for the culprit. It waits at most
// settleTimeout, and stops waiting as soon as anything grows (the host's
// count, or the commands' once the buffers are counted again without
// the killed command's): another command filling pipes at a GiB a
// second must not go unwatched, nor the host's limit be reached.
func (o *oomKiller) settle() {
	o.mu.Lock()
	victim, below := o.victim, o.below
	o.mu.Unlock()
	lowHost, lowUsed, gone := int64(-1), int64(-1), false
	for deadline := time.Now().Add(settleTimeout); time.Now().Before(deadline); {
		time.Sleep(oomPollBusy)
		if o.host != nil {
			host, err := o.hostUsed()
			if err != nil || host > o.hostLimit-hostMargin || lowHost >= 0 && host > lowHost+ownSlack {
				return
			}
			if lowHost < 0 || host < lowHost {
				lowHost = host
			}
		}
		if !gone {
			if sessionAlive(victim) {
				continue
			}
			// The last count of buffers still holds the killed
			// command's.
			gone = true
			o.rescan()
		}
		now, err := o.used()
		if err != nil || now <= below || lowUsed >= 0 && now > lowUsed+ownSlack {
			return
		}
		if lowUsed < 0 || now < lowUsed {
			lowUsed = now
		}
	}
}

// rescan counts the kernel buffers now, in place of the last count,
// which a background count begun before must not undo.
func (o *oomKiller) rescan() {
	b := scanBuffers(o.self)
	o.mu.Lock()
	o.bufs = b
	o.looks++
	o.mu.Unlock()
}

// sessionAlive reports whether a process of session sid is still live.
func sessionAlive(sid int) bool {
	for _, pr := range readProcs() {
		if pr.sid == sid {
			return true
		}
	}
	return false
}

// signalAll sends sig to every process but the daemon.
func (o *oomKiller) signalAll(sig unix.Signal) {
	for _, pr := range readProcs() {
		if pr.pid != o.self {
			_ = unix.Kill(pr.pid, sig)
		}
	}
}

// hostUsed is the host cgroup's count of the sandbox's memory that no
// reclaim can give back: anonymous memory (the sentry's heap among it)
// and shared memory (gVisor's memory file).
func (o *oomKiller) hostUsed() (int64, error) {
	var buf [4096]byte
	n, err := o.host.ReadAt(buf[:], 0)
	if n == 0 && err != nil {
		return 0, err
	}
	var used int64
	found := 0
	for line := range strings.Lines(string(buf[:n])) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && (k == "rss" || k == "shmem") {
			b, _ := strconv.ParseInt(v, 10, 64)
			used += b
			found++
		}
	}
	if found < 2 {
		return 0, errors.New("no rss and shmem in memory.stat")
	}
	return used, nil
}

// holdsMuch reports whether commands hold more than an eighth of the
// limit in kernel buffers.
func (o *oomKiller) holdsMuch() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bufs.total > o.limit/8
}

// scanner counts kernel buffers in the background.
func (o *oomKiller) scanner() {
	for {
		if o.resting() {
			time.Sleep(time.Duration(o.scanEvery.Load()))
			continue
		}
		o.mu.Lock()
		looks, before := o.looks, o.bufs.total
		o.mu.Unlock()
		start := time.Now()
		b := scanBuffers(o.self)
		took := time.Since(start)
		o.mu.Lock()
		if o.looks == looks {
			o.bufs = b
			if b.total-before > ownSlack {
				o.grew.Store(true)
			}
		}
		o.mu.Unlock()
		time.Sleep(max(time.Duration(o.scanEvery.Load()), took))
	}
}

// processOverhead is what each process of the sandbox costs the host
// beyond the memory gVisor counts: the systrap platform gives it stub
// processes of its own, whose page tables and kernel structures the
// host's cgroup charges (about 200 KiB measured).
const processOverhead = 384 << 10

// processes counts the sandbox's processes.
func processes() int64 {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range entries {
		if c := e.Name()[0]; c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// memoryUsed is the sentry's count of the sandbox's memory: anonymous
// memory, tmpfs, page cache and mappings.
func memoryUsed() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total, free int64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v << 10
		case "MemFree:":
			free = v << 10
		}
	}
	if total == 0 {
		return 0, errors.New("no MemTotal in /proc/meminfo")
	}
	return total - free, nil
}

// killLargest kills the command that holds the most: the session (each
// command has its own) whose processes, other than the daemon, hold the
// most resident memory and kernel buffers, so that a command forking as
// fast as it can is stopped whole rather than one child at a time. It
// returns the session killed, or -1, and the memory it held.
func (o *oomKiller) killLargest() (victim int, held int64) {
	procs := readProcs()
	o.mu.Lock()
	byPid := o.bufs.byPid
	o.mu.Unlock()
	bySession := map[int]int64{}
	for _, pr := range procs {
		if pr.pid != o.self && pr.sid != o.self {
			bySession[pr.sid] += pr.rss*int64(os.Getpagesize()) + byPid[pr.pid]
		}
	}
	victim, held = -1, -1
	for sid, n := range bySession {
		if n > held {
			victim, held = sid, n
		}
	}
	if victim < 0 {
		return -1, 0
	}
	// Counted first: sandboxd reads the count once the command ends.
	o.kills.Add(1)
	for _, pr := range procs {
		if pr.pid != o.self && pr.sid == victim {
			_ = unix.Kill(pr.pid, unix.SIGKILL)
		}
	}
	return victim, held
}

type proc struct {
	pid, sid int
	rss      int64 // pages
}

// readProcs lists the sandbox's live processes.
func readProcs() []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var procs []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command name, which may hold anything: state,
		// ppid, pgrp, session, ... rss is field 24.
		st := string(b)
		f := strings.Fields(st[strings.LastIndexByte(st, ')')+1:])
		if len(f) < 22 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		sid, _ := strconv.Atoi(f[3])
		rss, _ := strconv.ParseInt(f[21], 10, 64)
		procs = append(procs, proc{pid: pid, sid: sid, rss: rss})
	}
	return procs
}
