package remotefake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
)

// Command is a process to start in a machine.
type Command struct {
	Argv []string
	// Env is added to the machine's environment.
	Env map[string]string
	// Dir is the working directory; empty means "/".
	Dir string
	// User is "" or "root" for root, or the machine's user
	// (Machine.UserName, uid Machine.UID, home Machine.Home).
	User string
	// Stdin gives the process a stdin pipe, Process.Stdin.
	Stdin bool
}

// Process is a process started in a machine.
//
// Its output streams are kept in memory up to 4 MiB each while nobody
// reads them; past that the process waits at its next write, as at a
// full pipe (and its other stream waits with it: both come over one
// connection). So output is never lost, and a process whose output
// nobody reads may block, as with a real pipe. Closing a stream (Stdout
// and Stderr are io.ReadClosers underneath) drops what follows on it.
type Process struct {
	m      *Machine
	execID string
	pid    int
	stdout *pipe
	stderr *pipe
	stdin  io.WriteCloser

	sigMu  sync.Mutex
	pidfd  int // -1 once the process has exited or could not be opened
	exited bool

	done chan struct{}
	code int
	err  error
}

// Start starts c in the machine. The process runs until it exits, is
// signalled or the machine ends: ctx bounds only the start, and no
// connection of a caller holds it.
func (m *Machine) Start(ctx context.Context, c Command) (*Process, error) {
	if err := m.check(false); err != nil {
		return nil, err
	}
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return nil, fmt.Errorf("%w: remotefake: no command", errdefs.ErrBadInput)
	}
	env, err := envSlice(c.Env)
	if err != nil {
		return nil, err
	}
	var user string
	switch c.User {
	case "", "root":
		user = "0:0"
	case m.user:
		user = strconv.Itoa(m.uid) + ":" + strconv.Itoa(m.uid)
	default:
		return nil, fmt.Errorf("%w: remotefake: unknown user %q (root or %s)", errdefs.ErrBadInput, clip(c.User), m.user)
	}
	dir := c.Dir
	if dir == "" {
		dir = "/"
	}
	// The shell says the process's pid in the machine on the first line
	// of its output, then becomes the command.
	argv := append([]string{"/bin/sh", "-c", `echo $$ && exec "$@"`, "sh"}, c.Argv...)
	if c.User == m.user {
		env = append(env, "HOME="+m.Home(), "USER="+m.user)
	}
	ex, err := m.farm.docker.ExecCreate(ctx, m.container, client.ExecCreateOptions{
		User:         user,
		AttachStdin:  c.Stdin,
		AttachStdout: true,
		AttachStderr: true,
		Env:          env,
		WorkingDir:   dir,
		Cmd:          argv,
	})
	if err != nil {
		if err := m.check(false); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("remotefake: start in machine %q: %v", m.id, oneLine(err))
	}
	att, err := m.farm.docker.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("remotefake: start in machine %q: %v", m.id, oneLine(err))
	}
	p := &Process{m: m, execID: ex.ID, stdout: newPipe(), stderr: newPipe(), pidfd: -1, done: make(chan struct{})}
	if c.Stdin {
		p.stdin = &stdin{att: &att.HijackedResponse}
	}
	first := &firstLine{rest: p.stdout, line: make(chan int, 1)}
	go p.run(&att.HijackedResponse, first)
	select {
	case p.pid = <-first.line:
	case <-ctx.Done():
		att.Close()
		p.kill()
		return nil, fmt.Errorf("%w: remotefake: start in machine %q: %v", errdefs.ErrCanceled, m.id, ctx.Err())
	}
	if p.pid <= 0 {
		// The shell did not start (no such directory, say).
		att.Close()
		select {
		case <-p.done:
			code, err := p.Wait()
			if err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: remotefake: start in machine %q: the process did not start (code %d)", errdefs.ErrBadInput, m.id, code)
		case <-ctx.Done():
			p.kill()
			return nil, fmt.Errorf("%w: remotefake: start in machine %q: %v", errdefs.ErrCanceled, m.id, ctx.Err())
		}
	}
	p.openPidfd(ctx)
	return p, nil
}

// run copies the process's output until it ends, then learns its exit
// code.
func (p *Process) run(att *client.HijackedResponse, first *firstLine) {
	defer close(p.done)
	_, err := stdcopy.StdCopy(first, p.stderr, att.Reader)
	att.Close()
	first.end()
	p.stdout.closeWrite(nil)
	p.stderr.closeWrite(nil)
	p.code, p.err = p.exitCode()
	if p.err == nil && err != nil && !errors.Is(err, io.EOF) {
		p.m.farm.log.Debug("remotefake: reading a process's output", "machine", p.m.id, "err", err)
	}
	p.sigMu.Lock()
	p.exited = true
	if p.pidfd >= 0 {
		unix.Close(p.pidfd)
		p.pidfd = -1
	}
	p.sigMu.Unlock()
}

// exitCode waits until the engine says the process has exited, which it
// may say a moment after its output ends.
func (p *Process) exitCode() (int, error) {
	ctx := context.Background()
	lost := fmt.Errorf("%w: remotefake: machine %q ended under the process", errdefs.ErrSandboxLost, p.m.id)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		insp, err := p.m.farm.docker.ExecInspect(ctx, p.execID, client.ExecInspectOptions{})
		if p.m.gone() {
			return -1, lost
		}
		if err != nil {
			return -1, fmt.Errorf("%w: remotefake: the exit of a process in machine %q: %v", errdefs.ErrSandboxLost, p.m.id, oneLine(err))
		}
		if !insp.Running {
			return insp.ExitCode, nil
		}
		time.Sleep(delay)
	}
}

// openPidfd pins the process for Signal, through its host pid.
func (p *Process) openPidfd(ctx context.Context) {
	// The engine may say the exec runs a moment after its output has
	// begun.
	var insp client.ExecInspectResult
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var err error
		insp, err = p.m.farm.docker.ExecInspect(ctx, p.execID, client.ExecInspectOptions{})
		if err != nil {
			return
		}
		if insp.Running && insp.PID > 0 {
			break
		}
		select {
		case <-p.done:
			return
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	fd, err := unix.PidfdOpen(insp.PID, 0)
	if err != nil {
		return
	}
	// The host pid is the process's if its pid in the machine's
	// namespace is the one it said, while the pidfd is open; or, when
	// it has said none yet, if the engine still has it running.
	if p.pid > 0 && nsPID(insp.PID) != p.pid {
		unix.Close(fd)
		return
	}
	if p.pid <= 0 {
		again, err := p.m.farm.docker.ExecInspect(ctx, p.execID, client.ExecInspectOptions{})
		if err != nil || !again.Running || again.PID != insp.PID {
			unix.Close(fd)
			return
		}
	}
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.exited {
		unix.Close(fd)
		return
	}
	p.pidfd = fd
}

// nsPID is the pid in its innermost pid namespace of host pid hp, or 0.
func nsPID(hp int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(hp) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// kill ends a process whose start failed.
func (p *Process) kill() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.openPidfd(ctx)
	p.Signal(ctx, syscall.SIGKILL)
}

// PID is the process's pid in the machine.
func (p *Process) PID() int { return p.pid }

// Stdout is the process's standard output as it produces it, for one
// reader.
func (p *Process) Stdout() io.Reader { return p.stdout }

// Stderr is the process's standard error as it produces it, for one
// reader.
func (p *Process) Stderr() io.Reader { return p.stderr }

// Stdin is the process's standard input, nil unless Command.Stdin;
// closing it ends the process's input.
func (p *Process) Stdin() io.WriteCloser { return p.stdin }

// Done is closed when the process has exited and its output has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits for the process to exit and its output streams to end, and
// returns its exit code: 128+n for a death by signal n. An error (wrapping
// errdefs.ErrSandboxLost) says the machine ended first. Output left
// unread past what the streams keep holds Wait up, as it holds up the
// process. Wait may be called from several goroutines.
func (p *Process) Wait() (exitCode int, err error) {
	<-p.done
	return p.code, p.err
}

// Signal sends sig to the process. One that has exited is an error
// wrapping errdefs.ErrNotFound and os.ErrProcessDone.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: remotefake: signal: %v", errdefs.ErrCanceled, err)
	}
	p.sigMu.Lock()
	defer p.sigMu.Unlock()
	if p.pidfd < 0 {
		return fmt.Errorf("%w: remotefake: process %d has exited (%w)", errdefs.ErrNotFound, p.pid, os.ErrProcessDone)
	}
	if err := unix.PidfdSendSignal(p.pidfd, sig, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("%w: remotefake: process %d has exited (%w)", errdefs.ErrNotFound, p.pid, os.ErrProcessDone)
		}
		return fmt.Errorf("remotefake: signal process %d: %v", p.pid, err)
	}
	return nil
}

// firstLine takes the pid line off the head of the process's output and
// passes the rest on.
type firstLine struct {
	rest *pipe
	buf  []byte
	line chan int
	seen bool
}

func (f *firstLine) Write(b []byte) (int, error) {
	if f.seen {
		return f.rest.Write(b)
	}
	n := len(b)
	f.buf = append(f.buf, b...)
	i := bytes.IndexByte(f.buf, '\n')
	if i < 0 {
		if len(f.buf) > 32 {
			f.end()
		}
		return n, nil
	}
	pid, _ := strconv.Atoi(string(f.buf[:i]))
	rest := f.buf[i+1:]
	f.buf = nil
	f.seen = true
	f.line <- pid
	if len(rest) > 0 {
		if _, err := f.rest.Write(rest); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// end says no pid line came, at the end of the output or past its bound.
func (f *firstLine) end() {
	if !f.seen {
		f.seen = true
		f.line <- 0
		f.buf = nil
	}
}

// stdin is a process's input over its exec's connection.
type stdin struct {
	mu  sync.Mutex
	att *client.HijackedResponse
}

func (s *stdin) Write(b []byte) (int, error) { return s.att.Conn.Write(b) }

func (s *stdin) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.att.CloseWrite()
}
