package gvisorinit

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// gVisor's kernel keeps pipe and socket buffers in the sentry's own
// heap, not in the memory it counts for the sandbox (/proc/meminfo), yet
// the host's cgroup charges them to the sandbox: 480 pipes of 1 MiB,
// filled and never read, are 480 MiB that the sandbox's count does not
// show and that, reaching the host's limit, kill the whole sandbox. So
// the daemon counts them itself: it looks at every descriptor of every
// process (pidfd_getfd, which its CAP_SYS_PTRACE, gVisor's, allows) and
// counts a pipe at its capacity, which gVisor may hold whole (it never
// shrinks a pipe's buffer once grown), and a socket at what is queued in
// it, to read and (but for unix sockets, whose peer queues it) to send.

// buffers is what a scan found.
type buffers struct {
	total int64         // each buffer once
	byPid map[int]int64 // what each process holds, shared buffers in each holder
}

// scanBuffers counts the kernel buffers of the sandbox's processes other
// than self.
func scanBuffers(self int) buffers {
	b := buffers{byPid: map[int]int64{}}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return b
	}
	seen := map[string]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b.scanProcess(pid, seen)
	}
	return b
}

func (b *buffers) scanProcess(pid int, seen map[string]bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	f, err := os.Open(dir)
	if err != nil {
		return // gone
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	pidfd := -1
	defer func() {
		if pidfd >= 0 {
			unix.Close(pidfd)
		}
	}()
	for _, name := range names {
		target, err := os.Readlink(dir + name)
		if err != nil || !strings.HasPrefix(target, "pipe:") && !strings.HasPrefix(target, "socket:") {
			continue
		}
		n, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if pidfd < 0 {
			if pidfd, err = unix.PidfdOpen(pid, 0); err != nil {
				return
			}
		}
		size := bufferSize(pidfd, n, strings.HasPrefix(target, "pipe:"))
		b.byPid[pid] += size
		if !seen[target] {
			seen[target] = true
			b.total += size
		}
	}
}

// bufferSize is what gVisor may hold for descriptor fd of the process of
// pidfd: a pipe's capacity, or a socket's queued bytes.
func bufferSize(pidfd, fd int, pipe bool) int64 {
	dup, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return 0
	}
	defer unix.Close(dup)
	if pipe {
		n, err := unix.FcntlInt(uintptr(dup), unix.F_GETPIPE_SZ, 0)
		if err != nil {
			return 0
		}
		return int64(n)
	}
	in, _ := unix.IoctlGetInt(dup, unix.TIOCINQ) // FIONREAD
	if domain, _ := unix.GetsockoptInt(dup, unix.SOL_SOCKET, unix.SO_DOMAIN); domain == unix.AF_UNIX {
		// What a unix socket's peer sent is queued at this end only
		// (its TIOCOUTQ is the same bytes).
		return int64(max(in, 0))
	}
	out, _ := unix.IoctlGetInt(dup, unix.TIOCOUTQ)
	return int64(max(in, 0)) + int64(max(out, 0))
}
