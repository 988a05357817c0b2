package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// Bounds of a terminal's input.
const (
	// maxTerminalInput bounds one input request's bytes.
	maxTerminalInput = 64 << 10
	// terminalWriteWait is how long input waits for room in the
	// terminal's buffer, which a command that reads nothing never makes.
	terminalWriteWait = 5 * time.Second
)

// terminal is a command's pseudo-terminal, from the exec request that
// asks for it until the command ends.
type terminal struct {
	ready  chan struct{} // closed once master is set, or the command failed to start
	master *os.File      // nil if the command failed to start
	mu     sync.Mutex    // serializes writes: a key's bytes are never interleaved
}

// terminals are the daemon's terminals, by command id.
type terminals struct {
	mu sync.Mutex
	m  map[string]*terminal
}

func (ts *terminals) add(id string) *terminal {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		ts.m = map[string]*terminal{}
	}
	t := &terminal{ready: make(chan struct{})}
	ts.m[id] = t
	return t
}

func (ts *terminals) remove(id string, t *terminal) {
	ts.mu.Lock()
	if ts.m[id] == t {
		delete(ts.m, id)
	}
	ts.mu.Unlock()
	select {
	case <-t.ready:
	default:
		close(t.ready) // never started
	}
}

// get waits until the command id's terminal is open.
func (ts *terminals) get(ctx context.Context, id string) (*terminal, error) {
	ts.mu.Lock()
	t := ts.m[id]
	ts.mu.Unlock()
	if t == nil {
		return nil, fmt.Errorf("%w: no running command %q on a terminal", errdefs.ErrNotFound, id)
	}
	select {
	case <-t.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if t.master == nil {
		return nil, fmt.Errorf("%w: command %q did not start", errdefs.ErrNotFound, id)
	}
	return t, nil
}

// openPTY opens a pseudo-terminal pair of the given size. The master is
// non-blocking and read through Go's poller: a read can then be given a
// deadline, as the pipes of other commands are (a background process
// that keeps the terminal open must not hold up the end of the command
// that started it), and a read under way ends when the file is closed.
func openPTY(size provider.TerminalSize, uid, gid int) (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master = os.NewFile(uintptr(mfd), "ptmx")
	defer func() {
		if err != nil {
			master.Close()
		}
	}()
	var unlock int32
	if err := ioctlPtr(mfd, unix.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	// TIOCGPTPEER opens the slave from the master, without a lookup of
	// a path in /dev/pts; kernels before 4.13 lack it.
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
		if err != nil {
			return nil, nil, fmt.Errorf("pty number: %w", err)
		}
		fd, err := unix.Open("/dev/pts/"+strconv.FormatUint(uint64(n), 10), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("open pty: %w", err)
		}
		sfd = uintptr(fd)
	}
	slave = os.NewFile(sfd, "pts")
	if uid >= 0 {
		// The command's own terminal, as login would make it.
		_ = unix.Fchown(int(sfd), uid, gid)
	}
	if err := resize(master, size); err != nil {
		slave.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// resize sets a terminal's size, without File.Fd, which would make the
// master blocking.
func resize(master *os.File, size provider.TerminalSize) error {
	if size.Rows == 0 {
		size.Rows = provider.DefaultTerminalSize.Rows
	}
	if size.Cols == 0 {
		size.Cols = provider.DefaultTerminalSize.Cols
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return err
	}
	if ierr != nil {
		return fmt.Errorf("resize terminal: %w", ierr)
	}
	return nil
}

// startOnTerminal starts a command whose stdin, stdout, stderr and
// controlling terminal are a new pseudo-terminal's slave; term gets the
// master, which is also the command's only output.
func (s *Server) startOnTerminal(path string, argv, env []string, dir string, size provider.TerminalSize, term *terminal) (*command, error) {
	uid, gid := -1, -1
	if s.switchUser {
		uid, gid = s.cfg.UID, s.cfg.GID
	}
	master, slave, err := openPTY(size, uid, gid)
	if err != nil {
		return nil, err
	}
	defer slave.Close()
	// Setctty's Ctty is a descriptor in the child: its stdin.
	sys := &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if s.switchUser {
		sys.Credential = &syscall.Credential{Uid: uint32(s.cfg.UID), Gid: uint32(s.cfg.GID)}
	}
	fd := slave.Fd()
	var cmd command
	cmd.pid, cmd.wait, err = s.procs.start(path, argv, env, dir, []uintptr{fd, fd, fd}, sys)
	if err != nil {
		master.Close()
		return nil, startError(argv[0], err)
	}
	cmd.out[stdout] = master
	term.master = master
	close(term.ready)
	return &cmd, nil
}

// input writes data to the terminal, waiting terminalWriteWait at most
// for room.
func (t *terminal) input(data []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	_ = t.master.SetWriteDeadline(time.Now().Add(terminalWriteWait))
	_, err := t.master.Write(data)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: the terminal's input is full: the command reads none", errdefs.ErrBadInput)
	case errors.Is(err, os.ErrClosed), errors.Is(err, unix.EIO):
		return fmt.Errorf("%w: the command's terminal is closed", errdefs.ErrNotFound)
	}
	return err
}

func (s *Server) handleTerminalInput(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxTerminalInput+1))
	if err != nil {
		writeError(w, fmt.Errorf("%w: terminal input: %v", errdefs.ErrBadInput, err))
		return
	}
	if len(data) > maxTerminalInput {
		writeError(w, fmt.Errorf("%w: terminal input of more than %d bytes at once", errdefs.ErrBadInput, maxTerminalInput))
		return
	}
	t, err := s.terms.get(r.Context(), r.URL.Query().Get("id"))
	if err == nil {
		err = t.input(data)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleResize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rows, err1 := strconv.ParseUint(q.Get("rows"), 10, 16)
	cols, err2 := strconv.ParseUint(q.Get("cols"), 10, 16)
	size := provider.TerminalSize{Rows: uint16(rows), Cols: uint16(cols)}
	if err1 != nil || err2 != nil || size.Rows > provider.MaxTerminalSide || size.Cols > provider.MaxTerminalSide {
		writeError(w, fmt.Errorf("%w: terminal size %q x %q: rows and columns are numbers up to %d", errdefs.ErrBadInput, q.Get("rows"), q.Get("cols"), provider.MaxTerminalSide))
		return
	}
	t, err := s.terms.get(r.Context(), q.Get("id"))
	if err == nil {
		t.mu.Lock()
		err = resize(t.master, size)
		t.mu.Unlock()
		if errors.Is(err, os.ErrClosed) {
			err = fmt.Errorf("%w: the command's terminal is closed", errdefs.ErrNotFound)
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
