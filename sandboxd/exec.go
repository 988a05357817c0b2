package sandboxd

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/berth-dev/berth/internal/randid"

	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// maxExecHeader bounds the JSON that opens an exec request.
const maxExecHeader = 4 << 20

// execEnd is the last frame of an exec response.
type execEnd struct {
	Result provider.ExecResult `json:"result"`
	Error  *wireError          `json:"error,omitempty"`
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	body := io.LimitReader(r.Body, maxExecHeader)
	dec := json.NewDecoder(body)
	var hdr execHeader
	if err := dec.Decode(&hdr); err != nil {
		writeError(w, fmt.Errorf("%w: exec header: %v", errdefs.ErrBadInput, err))
		return
	}
	req := provider.ExecRequest{ID: hdr.ID, Argv: hdr.Argv, Shell: hdr.Shell, Env: hdr.Env, Dir: hdr.Dir,
		Timeout: hdr.Timeout, TTY: hdr.TTY, StdoutOffset: hdr.StdoutOffset, StderrOffset: hdr.StderrOffset}
	if hdr.TTY != nil && hdr.Stdin {
		writeError(w, fmt.Errorf("%w: a command on a terminal takes its input through the terminal", errdefs.ErrBadInput))
		return
	}
	if err := provider.ValidateExec(req); err != nil {
		writeError(w, err)
		return
	}
	if hdr.ID == "" {
		hdr.ID = newID()
	}
	var stdin io.Reader
	if hdr.Stdin {
		// The decoder may have read past the header into stdin; the
		// newline that ends the header is not part of it.
		stdin = io.MultiReader(dec.Buffered(), r.Body)
		var nl [1]byte
		if _, err := io.ReadFull(stdin, nl[:]); err != nil || nl[0] != '\n' {
			writeError(w, fmt.Errorf("%w: exec header must end with a newline", errdefs.ErrBadInput))
			return
		}
	}
	select {
	case <-s.configured:
	case <-r.Context().Done():
		return
	}
	rec, created := s.journal.claim(hdr.ID)
	var feed *stdinFeed
	if created {
		// The command's stdin is this request's body, which can only be
		// read while the response is being written.
		_ = http.NewResponseController(w).EnableFullDuplex()
		if stdin != nil {
			feed = &stdinFeed{r: stdin, done: make(chan struct{})}
		}
		var term *terminal
		if hdr.TTY != nil {
			// Known before the command starts: input sent meanwhile
			// waits for its terminal rather than miss it.
			term = s.terms.add(hdr.ID)
		}
		go s.run(rec, hdr, feed, term)
	}
	s.stream(w, r, rec, [2]int64{hdr.StdoutOffset, hdr.StderrOffset}, !created)
	if feed != nil {
		// The result goes out now, not once the body is drained.
		_ = http.NewResponseController(w).Flush()
		// The body is read to its end before the handler returns (see
		// stdinFeed), or for as long as stdinDrainWait at most.
		t := time.NewTimer(stdinDrainWait)
		defer t.Stop()
		select {
		case <-feed.done:
		case <-t.C:
		}
	}
}

// stdinFeed is a command's standard input: the body of the request that
// started it. What the command does not read is read and dropped, up to
// maxStdinDrain bytes, before the request ends: the server closes a
// connection whose request was not read whole, and a client still
// writing the end of its request to it then fails on that write, which
// it may see before the command's result, already sent.
type stdinFeed struct {
	r    io.Reader
	once sync.Once
	done chan struct{} // closed once the body is read, or will not be
}

// Bounds of what a request's unread standard input costs.
const (
	maxStdinDrain  = 1 << 20
	stdinDrainWait = time.Second
)

// feed copies the body to w, the command's stdin, then reads on to the
// end of the body (to maxStdinDrain).
func (f *stdinFeed) feed(w io.WriteCloser) {
	defer f.finish()
	_, _ = io.Copy(w, f.r)
	w.Close()
	_, _ = io.CopyN(io.Discard, f.r, maxStdinDrain)
}

func (f *stdinFeed) finish() { f.once.Do(func() { close(f.done) }) }

// headerWait is how long a response's header waits for the command's
// first output or its end, to go out with them in one write: a quick
// command's whole response is then one write, and one wake-up of the
// client, rather than three (the header, the frames, the end of the
// body). A longer command's header goes out on its own after it, so
// that proxies between client and daemon see the response begin.
const headerWait = 20 * time.Millisecond

// stream sends a record's output from the given offsets, then its end.
// The last frame is not flushed: the end of the body, which the server
// writes when the handler returns, goes out with it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rec *record, off [2]int64, attached bool) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	rd := rec.attach(off)
	defer rec.detach(rd)
	first, cancel := context.WithTimeout(r.Context(), headerWait)
	defer cancel()
	ctx := first
	b0, b1 := s.bufs.get(), s.bufs.get()
	defer s.bufs.put(b0)
	defer s.bufs.put(b1)
	bufs := [2][]byte{*b0, *b1}
	for {
		c, ok := rec.next(ctx, rd, &bufs)
		if !ok && ctx == first && r.Context().Err() == nil {
			if rc.Flush() != nil {
				return
			}
			ctx = r.Context()
			continue
		}
		if !ok {
			return // the caller went away; the command goes on
		}
		ctx = r.Context()
		for i, typ := range [2]byte{frameStdout, frameStderr} {
			if c.skip[i] > 0 {
				var gap [9]byte
				gap[0] = typ
				binary.BigEndian.PutUint64(gap[1:], uint64(c.skip[i]))
				if writeFrame(w, frameGap, gap[:]) != nil {
					return
				}
			}
			if len(c.data[i]) > 0 && writeFrame(w, typ, c.data[i]) != nil {
				return
			}
		}
		if c.end {
			rec.mu.Lock()
			res, err := rec.result, rec.err
			rec.mu.Unlock()
			if err != nil && res.StartedAt.IsZero() {
				_ = writeJSONFrame(w, frameError, toWire(err))
				return
			}
			res.Attached = attached
			res.Truncated = res.Truncated || rd.truncated
			end := execEnd{Result: res}
			if err != nil {
				we := toWire(err)
				end.Error = &we
			}
			_ = writeJSONFrame(w, frameResult, end)
			return
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// WarmUp runs a command outside the journal, so that the first command
// a caller asks for does not pay for the daemon's first fork and exec.
func (s *Server) WarmUp(argv ...string) error {
	_, err := s.execute(newRecord("warmup", s.cfg.OutputCap), execHeader{Argv: argv}, nil, nil)
	return err
}

// run starts the command of a new record and records how it ends.
func (s *Server) run(rec *record, hdr execHeader, stdin *stdinFeed, term *terminal) {
	s.running.Add(1)
	defer s.running.Add(-1)
	defer s.journal.retire(rec)
	if term != nil {
		defer s.terms.remove(rec.id, term)
	}
	res, err := s.execute(rec, hdr, stdin, term)
	rec.finish(res, err)
	if err != nil {
		s.log.Debug("exec", "id", rec.id, "err", err)
	}
}

func (s *Server) execute(rec *record, hdr execHeader, stdin *stdinFeed, term *terminal) (provider.ExecResult, error) {
	var res provider.ExecResult
	fed := false
	if stdin != nil {
		defer func() {
			if !fed {
				stdin.finish() // the command never started: nothing reads the body
			}
		}()
	}
	dir, err := s.workDir(hdr.Dir)
	if err != nil {
		return res, err
	}
	env := s.environ(hdr.Env)
	argv := hdr.Argv
	if hdr.Shell != "" {
		argv = []string{"/bin/sh", "-c", hdr.Shell}
	}
	path := lookPath(argv[0], dir, env)
	if path == "" {
		return res, fmt.Errorf("%w: %w: %q", errdefs.ErrBadInput, errdefs.ErrCommandNotFound, argv[0])
	}

	var cmd *command
	if term != nil {
		cmd, err = s.startOnTerminal(path, argv, env, dir, *hdr.TTY, term)
	} else {
		cmd, err = s.startCommand(path, argv, env, dir, stdin != nil)
	}
	if err != nil {
		return res, err
	}
	rec.mu.Lock()
	rec.pid = cmd.pid
	rec.mu.Unlock()
	oomBefore := s.oomKills()
	res.StartedAt = time.Now()
	if stdin != nil {
		fed = true
		go stdin.feed(cmd.stdin)
	}
	var pumps sync.WaitGroup
	for i, f := range cmd.out {
		if f != nil {
			pumps.Go(func() { s.pump(rec, i, f) })
		}
	}

	var timedOut atomic.Bool
	if hdr.Timeout > 0 {
		var since uint64
		if st, err := readStat(cmd.pid); err == nil {
			since = st.start
		}
		timer := time.AfterFunc(hdr.Timeout, func() {
			timedOut.Store(true)
			// Escapees are told apart by being new sessions: only when
			// the daemon is PID 1 of the sandbox's own PID namespace,
			// or the subreaper of its commands (in a hosted machine,
			// whose first process is the service's), can every new
			// session among its descendants be the command's.
			// Elsewhere (a daemon run by tests on the host) they may
			// be the host's.
			escapees := s.running.Load() == 1 && (os.Getpid() == 1 || isSubreaper())
			killTree(cmd.pid, since, escapees, s.procs.running)
		})
		defer timer.Stop()
	}
	ws := cmd.wait()
	res.Duration = time.Since(res.StartedAt)

	// Background processes may hold the pipes open: collect what they
	// write for a moment, then let the pumps go.
	grace := time.Now().Add(s.cfg.ExitGrace)
	for _, f := range cmd.out {
		if f != nil {
			_ = f.SetReadDeadline(grace)
		}
	}
	pumps.Wait()

	res.ExitCode = ws.ExitStatus()
	if ws.Signaled() {
		res.ExitCode = -1
		res.Signal = unix.SignalName(ws.Signal())
	}
	switch {
	case timedOut.Load():
		res.TimedOut = true
		return res, fmt.Errorf("%w: command ran past its %v timeout", errdefs.ErrTimeout, hdr.Timeout)
	case s.oomKills() > oomBefore:
		res.OOMKilled = true
		return res, fmt.Errorf("%w: the sandbox reached its memory limit and the command was killed", errdefs.ErrOutOfMemory)
	}
	return res, nil
}

// command is a started process and the daemon's ends of its pipes.
type command struct {
	pid   int
	wait  func() unix.WaitStatus
	stdin *os.File
	out   [2]*os.File
}

func (s *Server) startCommand(path string, argv, env []string, dir string, withStdin bool) (*command, error) {
	var cmd command
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	files := []uintptr{s.devNull.Fd(), 0, 0}
	var err error
	if withStdin {
		var stdinR *os.File
		if stdinR, cmd.stdin, err = os.Pipe(); err != nil {
			return nil, err
		}
		childEnds = append(childEnds, stdinR)
		files[0] = stdinR.Fd()
	}
	for i := range cmd.out {
		r, w, err := outputPipe()
		if err != nil {
			cmd.close()
			return nil, err
		}
		cmd.out[i] = r
		childEnds = append(childEnds, w)
		files[i+1] = w.Fd()
	}
	sys := &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	if s.switchUser {
		sys.Credential = &syscall.Credential{Uid: uint32(s.cfg.UID), Gid: uint32(s.cfg.GID)}
	}
	cmd.pid, cmd.wait, err = s.procs.start(path, argv, env, dir, files, sys)
	if err != nil {
		cmd.close()
		return nil, startError(argv[0], err)
	}
	return &cmd, nil
}

// outputPipe makes a pipe for a command's output: the daemon's end, r,
// non-blocking and read through the poller, the command's, w, blocking
// and never polled. (os.Pipe makes both ends pollable, and handing w to
// the child would then cost more system calls to undo that.)
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

func (c *command) close() {
	for _, f := range append(c.out[:], c.stdin) {
		if f != nil {
			f.Close()
		}
	}
}

func startError(name string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %w: %q", errdefs.ErrBadInput, errdefs.ErrCommandNotFound, name)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: %q: permission denied", errdefs.ErrBadInput, name)
	case errors.Is(err, unix.ENOEXEC):
		return fmt.Errorf("%w: %q: not an executable format", errdefs.ErrBadInput, name)
	case errors.Is(err, unix.E2BIG):
		return fmt.Errorf("%w: %q: arguments and environment too long", errdefs.ErrBadInput, name)
	}
	return fmt.Errorf("start %q: %w", name, err)
}

// pump copies one output pipe into the journal until the command and
// everything holding the pipe are done, or the grace after exit runs out;
// then it drains the pipe in the background so late writers do not die
// of a broken pipe.
func (s *Server) pump(rec *record, stream int, f *os.File) {
	b := s.bufs.get()
	defer s.bufs.put(b)
	buf := (*b)[:32<<10]
	for {
		n, err := f.Read(buf)
		if n > 0 {
			rec.append(stream, buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The grace is over, but what the pipe holds now was written
			// before it ended: the command's own last output may be
			// there still, when the pump was slow to get to it (a loaded
			// machine, a reader holding the journal back). A Read past
			// its deadline reads nothing, even what is there.
			_ = f.SetReadDeadline(time.Time{})
			readBuffered(f, buf, func(b []byte) { rec.append(stream, b) })
			go func() {
				_, _ = io.Copy(io.Discard, f)
				f.Close()
			}()
			return
		}
		if err != nil {
			f.Close()
			return
		}
	}
}

// readBuffered passes what f holds now to add, without waiting for
// more: a background process may go on writing, and what it writes from
// now on is no longer the command's output.
func readBuffered(f *os.File, buf []byte, add func([]byte)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	var left int // TIOCINQ is FIONREAD: the bytes a pipe or a terminal holds
	if cerr := rc.Control(func(fd uintptr) { left, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); cerr != nil || err != nil {
		return
	}
	for left > 0 {
		var n int
		rerr := rc.Read(func(fd uintptr) bool {
			n, err = unix.Read(int(fd), buf[:min(left, len(buf))])
			return true // never wait: only what is there
		})
		if rerr != nil || err != nil || n <= 0 {
			return
		}
		add(buf[:n])
		left -= n
	}
}

func (s *Server) oomKills() int64 {
	if s.cfg.OOMKills == nil {
		return 0
	}
	n, err := s.cfg.OOMKills()
	if err != nil {
		s.log.Warn("read out-of-memory count", "err", err)
	}
	return n
}

// workDir resolves a command's working directory inside the workspace.
func (s *Server) workDir(dir string) (string, error) {
	if dir == "" {
		s.mu.RLock()
		dir = s.cfg.Dir
		s.mu.RUnlock()
	}
	rel, err := provider.WorkspacePath(dir)
	if err != nil {
		return "", err
	}
	fi, err := s.root.Stat(rel)
	if err != nil {
		return "", s.fileError("working directory", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: working directory %q is not a directory", errdefs.ErrBadInput, dir)
	}
	return s.cfg.Workspace + "/" + rel, nil
}

// environ merges the base environment and a request's, sorted so that
// commands see the same order every time.
func (s *Server) environ(extra map[string]string) []string {
	s.mu.RLock()
	m := maps.Clone(s.cfg.Env)
	s.mu.RUnlock()
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, extra)
	env := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		env = append(env, k+"="+m[k])
	}
	return env
}

func newID() string { return "x" + randid.Hex(12) }

func (s *Server) handleSignal(w http.ResponseWriter, r *http.Request) {
	var req signalRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		writeError(w, fmt.Errorf("%w: signal request: %v", errdefs.ErrBadInput, err))
		return
	}
	sig, err := provider.ParseSignal(req.Signal)
	if err == nil {
		err = provider.ValidateID(req.ID)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	rec := s.journal.find(req.ID)
	if rec == nil {
		writeError(w, fmt.Errorf("%w: no command %q in this sandbox", errdefs.ErrBadInput, req.ID))
		return
	}
	rec.mu.Lock()
	pid, done := rec.pid, rec.done
	rec.mu.Unlock()
	if pid != 0 && !done {
		s.procs.signal(pid, unix.SignalNum("SIG"+sig))
	}
	w.WriteHeader(http.StatusNoContent)
}
