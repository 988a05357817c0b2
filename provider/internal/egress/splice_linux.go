//go:build linux

package egress

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// pipeDir is one direction of a relayed connection spliced through a
// pipe of its own: src's receive buffer, the pipe, dst's send buffer.
type pipeDir struct {
	src, dst syscall.RawConn
	pr, pw   int
	pipeCap  int // the pipe's size
}

// newPipeDir makes src to dst's pipe, or returns nil if either is not a
// TCP connection or no pipe can be had (the relay then copies through
// io.CopyN).
func newPipeDir(dst, src net.Conn) *pipeDir {
	s, ok1 := src.(*net.TCPConn)
	d, ok2 := dst.(*net.TCPConn)
	if !ok1 || !ok2 {
		return nil
	}
	sr, err1 := s.SyscallConn()
	dr, err2 := d.SyscallConn()
	if err1 != nil || err2 != nil {
		return nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil
	}
	// A larger pipe lets a fast connection move more a system call; the
	// relay never puts more in than a move (sendBuf), so it holds no
	// more. Past fs.pipe-max-size (or the user's pipe quota) the pipe
	// keeps the size it has.
	_, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, sendBuf(maxRecvBuf))
	size, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETPIPE_SZ, 0)
	if err != nil || size <= 0 {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil
	}
	return &pipeDir{src: sr, dst: dr, pr: fds[0], pw: fds[1], pipeCap: size}
}

func (d *pipeDir) close() {
	unix.Close(d.pr)
	unix.Close(d.pw)
}

// move splices what src has, at most most bytes, into the pipe, waiting
// (under src's read deadline) until it has some, then all of it on to
// dst. It returns 0 at src's end. The pipe is empty between two moves,
// so a move that fails leaves nothing behind that matters: the caller
// ends the connection.
func (d *pipeDir) move(most int) (int, error) {
	var n64 int64
	var serr error
	err := d.src.Read(func(fd uintptr) bool {
		for {
			n64, serr = unix.Splice(int(fd), nil, d.pw, nil, most, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			if serr != unix.EINTR {
				return serr != unix.EAGAIN
			}
		}
	})
	if err == nil {
		err = serr
	}
	n := int(n64)
	if err != nil || n == 0 {
		return 0, err
	}
	left := n
	err = d.dst.Write(func(fd uintptr) bool {
		for left > 0 {
			m, e := unix.Splice(d.pr, nil, int(fd), nil, left, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			switch e {
			case nil:
				left -= int(m)
			case unix.EINTR:
			case unix.EAGAIN:
				return false
			default:
				serr = e
				return true
			}
		}
		return true
	})
	if err == nil {
		err = serr
	}
	return n - left, err
}

// setBuffer sets c's receive buffer (rcv) or send buffer to size bytes,
// as the kernel counts them (its SO_RCVBUF is half of that), past
// net.core.rmem_max and wmem_max when the process may, and returns the
// size the kernel set. Set, a buffer no longer grows by itself; a
// receive buffer's window is clamped to it too, which also lets the
// window grow when the buffer does.
func setBuffer(c syscall.RawConn, rcv bool, size int) int {
	force, plain := unix.SO_SNDBUFFORCE, unix.SO_SNDBUF
	if rcv {
		force, plain = unix.SO_RCVBUFFORCE, unix.SO_RCVBUF
	}
	got := 0
	_ = c.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, force, size/2) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, plain, size/2)
		}
		if rcv {
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_WINDOW_CLAMP, size)
		}
		got, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, plain)
	})
	return got
}

// tcpRaw is c's TCP connection and its descriptor, or nil if c is not
// a TCP connection.
func tcpRaw(c net.Conn) (*net.TCPConn, syscall.RawConn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil, nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, nil
	}
	return tc, rc
}

// setBuffers sets c's buffers to the smallest a relayed direction's
// start at, for a connection not (or not yet) relayed by a pipeDir.
func setBuffers(c net.Conn) { setConnBuffers(c, minRecvBuf, sendBuf(minRecvBuf)) }

// setConnBuffers sets c's receive and send buffers, if it is TCP.
func setConnBuffers(c net.Conn, rcv, snd int) {
	if _, rc := tcpRaw(c); rc != nil {
		setBuffer(rc, true, rcv)
		setBuffer(rc, false, snd)
	}
}

// discardUnsent makes c's close drop what it has not yet sent (a reset
// instead of an orphaned socket that keeps it), if it has any.
func discardUnsent(c net.Conn) {
	tc, rc := tcpRaw(c)
	if rc == nil {
		return
	}
	unsent := 0
	_ = rc.Control(func(fd uintptr) { unsent, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQNSD) })
	if unsent > 0 {
		_ = tc.SetLinger(0)
	}
}
