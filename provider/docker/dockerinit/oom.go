package dockerinit

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/daemonmem"
)

// memoryGuard ends the command that holds a sandbox's memory when the
// kernel will not. The container's memory cgroup counts everything the
// sandbox holds, kernel buffers included, but its out-of-memory killer
// runs only when reclaim frees nothing, and reclaim can always free the
// pages of the image's files the commands run from: they are charged to
// the container when first read, unlike the linux provider's host
// files. So a command that holds nearly the limit in memory nothing can
// reclaim (socket buffers, here 118 MiB in a 128 MiB sandbox) has the
// kernel evict and read back its own program text, for minutes, instead
// of being killed.
//
// The guard watches the cgroup for that state: what commands hold
// beyond the reach of reclaim (the cgroup's usage less its file pages
// and the daemon's own memory) past the limit less the daemon's reserve,
// which on the linux provider is the commands' own limit, while the
// cgroup faults pages back in without pause (thrashFaults in each poll,
// for thrashPolls polls in a row). Then it kills the sandbox user's
// process with the highest oom_score, the kernel's own choice, and
// counts the kill, which sandboxd reports as the command running out of
// memory. Memory merely held near the limit is the kernel's to deal
// with, as it is without the guard: it kills at the limit, at once.
type memoryGuard struct {
	uid   int
	cg    cgroupFiles
	kills atomic.Int64

	faults int64 // the cgroup's major faults at the last poll
	streak int   // polls that found the cgroup thrashing, since it last was not
	quiet  int   // polls in a row since the last that found it faulting
}

// cgroupFiles names the files of the container's memory cgroup, which
// Docker mounts read-only at /sys/fs/cgroup in its own cgroup namespace.
type cgroupFiles struct {
	usage, limit, stat string
	file               []string // memory.stat's keys of file pages on the LRU (tmpfs is not)
	faults             string   // memory.stat's key of major faults
}

var (
	cgroupV1 = cgroupFiles{
		usage:  "/sys/fs/cgroup/memory/memory.usage_in_bytes",
		limit:  "/sys/fs/cgroup/memory/memory.limit_in_bytes",
		stat:   "/sys/fs/cgroup/memory/memory.stat",
		file:   []string{"total_active_file", "total_inactive_file"},
		faults: "total_pgmajfault",
	}
	cgroupV2 = cgroupFiles{
		usage:  "/sys/fs/cgroup/memory.current",
		limit:  "/sys/fs/cgroup/memory.max",
		stat:   "/sys/fs/cgroup/memory.stat",
		file:   []string{"active_file", "inactive_file"},
		faults: "pgmajfault",
	}
)

// Guard timings. A poll reads one number, or memory.stat when usage is
// past the reserve. A thrashing cgroup was seen faulting 1,800 pages a
// second, for minutes; a second of it, at 200 a second or more, is
// enough to tell it from a moment's reading of files. After a kill, the
// victim's memory takes a moment to come back.
const (
	guardPoll    = 100 * time.Millisecond
	thrashFaults = 20
	thrashPolls  = 10
	guardAfter   = 200 * time.Millisecond
	// quietPolls is how many polls in a row without faults end a streak:
	// on a loaded host the thrashing command is itself off the CPU for
	// whole polls, and faults nothing in them, yet thrashes all the same.
	quietPolls = 20
)

// newMemoryGuard returns the guard of the container's memory cgroup, or
// nil where the container has none this process can read.
func newMemoryGuard(uid int) *memoryGuard {
	for _, cg := range []cgroupFiles{cgroupV2, cgroupV1} {
		if _, err := os.Stat(cg.usage); err == nil {
			return &memoryGuard{uid: uid, cg: cg}
		}
	}
	return nil
}

// count is the number of commands the guard killed.
func (g *memoryGuard) count() int64 {
	if g == nil {
		return 0
	}
	return g.kills.Load()
}

// run watches the cgroup for good.
func (g *memoryGuard) run() {
	var last string // the last error told, told once
	for {
		wait := guardPoll
		killed, err := g.check()
		switch {
		case err != nil:
			if err.Error() != last {
				fmt.Fprintf(os.Stderr, "berth-sandboxd: memory guard: %v\n", err)
			}
			last = err.Error()
			wait = 10 * guardPoll
		case killed:
			wait = guardAfter
		}
		time.Sleep(wait)
	}
}

// check kills a command if commands hold more than they may while the
// cgroup thrashes; it says whether it did.
func (g *memoryGuard) check() (bool, error) {
	limit, err := readLimit(g.cg.limit)
	if err != nil || limit <= 0 {
		return false, err
	}
	allowed := limit - daemonmem.Reserve(limit)
	usage, err := readInt(g.cg.usage)
	if err != nil || usage <= allowed {
		g.thrashing(false, false) // what commands hold is at most the usage
		return false, err
	}
	stat, err := os.ReadFile(g.cg.stat)
	if err != nil {
		return false, err
	}
	faults := statSum(stat, []string{g.cg.faults})
	faulting := faults-g.faults >= thrashFaults
	g.faults = faults
	held := usage - statSum(stat, g.cg.file) - daemonmem.Self()
	if !g.thrashing(held > allowed, faulting) {
		return false, nil
	}
	pid := g.victim()
	if pid <= 0 || !g.kill(pid) {
		return false, nil
	}
	g.streak, g.quiet = 0, 0
	fmt.Fprintf(os.Stderr, "berth-sandboxd: commands hold %d MiB that nothing can reclaim, of %d MiB allowed, and the kernel evicts and reads back their files: killed process %d\n", held>>20, allowed>>20, pid)
	return true, nil
}

// thrashing counts one poll, which found commands holding more than
// they may (over) and the cgroup faulting pages back in (faulting), and
// says whether the cgroup has thrashed long enough to kill a command:
// thrashPolls faulting polls while commands held too much, with no more
// than quietPolls in a row without faults between them.
func (g *memoryGuard) thrashing(over, faulting bool) bool {
	switch {
	case !over:
		g.streak, g.quiet = 0, 0
	case faulting:
		g.streak++
		g.quiet = 0
	default:
		if g.quiet++; g.quiet >= quietPolls {
			g.streak = 0
		}
	}
	return g.streak >= thrashPolls
}

// kill kills process pid if it is still the sandbox user's, and counts
// the kill; it says whether it did. The pidfd names the process for
// good: a pid that was reused is checked again, and one that ended is
// not signalled.
func (g *memoryGuard) kill(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if uid, ok := procUID(pid); !ok || uid != g.uid {
		return false
	}
	// The count goes first: sandboxd reads it when the victim's wait
	// returns.
	g.kills.Add(1)
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		g.kills.Add(-1)
		return false
	}
	return true
}

// victim is the sandbox user's process with the highest oom_score, or 0.
func (g *memoryGuard) victim() int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	best, bestScore := 0, int64(-1)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if uid, ok := procUID(pid); !ok || uid != g.uid {
			continue
		}
		score, err := readInt("/proc/" + e.Name() + "/oom_score")
		if err == nil && score > bestScore {
			best, bestScore = pid, score
		}
	}
	return best
}

// procUID reads the real uid of process pid.
func procUID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0, false
			}
			uid, err := strconv.Atoi(f[0])
			return uid, err == nil
		}
	}
	return 0, false
}

// readLimit reads a memory limit; "max" (cgroup v2) is none, 0.
func readLimit(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if s := strings.TrimSpace(string(b)); s != "max" {
		return strconv.ParseInt(s, 10, 64)
	}
	return 0, nil
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
}

// statSum adds up the values of keys in a memory.stat.
func statSum(stat []byte, keys []string) int64 {
	var sum int64
	for line := range strings.Lines(string(stat)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
		for _, want := range keys {
			if k == want {
				n, _ := strconv.ParseInt(v, 10, 64)
				sum += n
			}
		}
	}
	return sum
}
