package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider/internal/warmclaim"
	"github.com/berth-dev/berth/sandboxd"
)

// The daemon is the first process of the runsc container: the bundle's
// process is the daemon binary, bind-mounted read-only at daemonPath,
// with initArg as its first argument. It serves sandboxd on a unix socket
// in runDir, which the host bind-mounts from the container's directory;
// runsc's --host-uds=create makes the sockets the daemon binds there
// real sockets of the host's, which the host connects to. A second
// socket there takes the claim: a warm daemon waits, serving but with
// commands held back, until a sandbox takes it and tells it its
// environment, working directory and end of life.
const (
	initArg    = "gvisor-init"
	daemonPath = "/.berth/sandboxd"
	runDir     = "/.berth/run"
	// sockets in runDir
	socketName  = "sandboxd.sock"
	controlName = "control.sock"
	// configEnv carries daemonConfig.
	configEnv = "BERTH_GVISOR_INIT"
)

// daemonConfig is what the daemon needs from its start.
type daemonConfig struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Memory is the sandbox's memory limit, which the daemon enforces
	// (see oomKiller).
	Memory int64 `json:"memory"`
}

// Main runs the daemon when this process was started as a gVisor
// sandbox's first process, and then never returns. Otherwise it returns
// at once. Programs whose binary is the provider's DaemonPath call it
// first thing in main (and in TestMain).
func Main() {
	if len(os.Args) < 2 || os.Args[1] != initArg {
		return
	}
	if err := runDaemon(); err != nil {
		fmt.Fprintf(os.Stderr, "berth-sandboxd: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runDaemon() error {
	// A few MiB per sandbox matter more here than collection speed.
	debug.SetGCPercent(50)
	var cfg daemonConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		return fmt.Errorf("read %s: %w", configEnv, err)
	}
	os.Unsetenv(configEnv)
	if cfg.UID <= 0 || cfg.GID <= 0 {
		return fmt.Errorf("%s: the sandbox user must not be root", configEnv)
	}
	if err := remountNodev(); err != nil {
		return err
	}
	ln, err := warmclaim.Listen(runDir + "/" + socketName)
	if err != nil {
		return err
	}
	ctl, err := warmclaim.Listen(runDir + "/" + controlName)
	if err != nil {
		return err
	}
	oom := &oomKiller{limit: cfg.Memory, self: os.Getpid()}
	go oom.run()
	srv, err := sandboxd.New(sandboxd.Config{
		Workspace: "/workspace",
		UID:       cfg.UID,
		GID:       cfg.GID,
		Deferred:  true, // configured when claimed
		OOMKills:  oom.count,
	})
	if err != nil {
		return err
	}
	if err := srv.WarmUp("/bin/true"); err != nil {
		fmt.Fprintf(os.Stderr, "warm-up command: %v\n", err) // the root may have no /bin/true
	}
	return warmclaim.Serve(srv, ln, ctl, func(c warmclaim.Claim) error {
		return warmclaim.Apply(srv, c, maps.Clone(c.Env))
	})
}

// writable are the places commands may write, and their mount flags:
// runsc mounts a bundle's mounts without nodev, which the daemon adds.
var writable = []struct {
	dir   string
	flags uintptr
}{
	{"/workspace", unix.MS_NOSUID | unix.MS_NODEV},
	{"/tmp", unix.MS_NOSUID | unix.MS_NODEV},
	{"/dev/shm", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
}

func remountNodev() error {
	for _, m := range writable {
		if err := unix.Mount("", m.dir, "", unix.MS_REMOUNT|unix.MS_BIND|m.flags, ""); err != nil {
			return fmt.Errorf("remount %s nodev: %w", m.dir, err)
		}
	}
	return nil
}

// oomKiller enforces a sandbox's memory limit, counting each process's
// cost to the host (processOverhead) against it too. gVisor's sentry keeps
// the memory of all the sandbox's processes, and the host's cgroup limit
// counts it whole: reached, the host's out-of-memory killer would take
// the sentry and with it the sandbox (the sentry's memory cgroup files
// are stubs, so nothing in it limits its processes). So the host's limit
// has headroom above the sandbox's (see hostMemory), and the daemon
// watches the sentry's count of the sandbox's memory: past the limit,
// it kills the command process that holds the most, as the kernel's
// killer would, and counts a kill, which sandboxd reports as the
// command running out of memory.
type oomKiller struct {
	limit int64
	self  int
	kills atomic.Int64
}

func (o *oomKiller) count() (int64, error) { return o.kills.Load(), nil }

// Polling intervals: short once usage is past half the limit, since
// a process can take hundreds of MiB a second.
const (
	oomPollIdle = 25 * time.Millisecond
	oomPollBusy = 2 * time.Millisecond
)

func (o *oomKiller) run() {
	if o.limit <= 0 {
		return
	}
	for {
		used, err := memoryUsed()
		// What commands hold: all but the daemon's own memory, which has
		// a reserve of its own so that it can serve when commands have
		// taken all they can.
		used += processes()*processOverhead - selfRSS()
		wait := oomPollIdle
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "memory usage: %v\n", err)
		case used > o.limit-memoryReserve(o.limit):
			if o.killLargest() {
				o.kills.Add(1)
				// The memory comes back as the processes exit.
				time.Sleep(5 * time.Millisecond)
				continue
			}
			wait = oomPollBusy
		case used > o.limit/2:
			wait = oomPollBusy
		}
		time.Sleep(wait)
	}
}

// memoryReserve is how much of a sandbox's memory limit its commands
// cannot take, so that the daemon can serve (read, export, start
// commands) when they have taken all they can: 16 MiB, or a quarter of
// the limit when that is less, as in the linux provider.
func memoryReserve(limit int64) int64 { return min(16<<20, limit/4) }

// selfRSS is the daemon's own resident memory: its resident pages less
// those shared with files (its binary's), which all sandboxes share.
func selfRSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return 0
	}
	resident, _ := strconv.ParseInt(f[1], 10, 64)
	shared, _ := strconv.ParseInt(f[2], 10, 64)
	return max(resident-shared, 0) * int64(os.Getpagesize())
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
// command has its own) of the process, other than the daemon, with the
// most resident memory, so that a command forking as fast as it can is
// stopped whole rather than one child at a time. It reports whether
// there was one.
func (o *oomKiller) killLargest() bool {
	procs := readProcs()
	victim, most := -1, int64(-1)
	for i, pr := range procs {
		if pr.pid != o.self && pr.sid != o.self && pr.rss > most {
			victim, most = i, pr.rss
		}
	}
	if victim < 0 {
		return false
	}
	sid := procs[victim].sid
	for _, pr := range procs {
		if pr.pid != o.self && (pr.sid == sid || pr.pid == procs[victim].pid) {
			_ = unix.Kill(pr.pid, unix.SIGKILL)
		}
	}
	return true
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
