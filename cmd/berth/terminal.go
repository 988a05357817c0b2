package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/provider"
)

// makeRaw puts the terminal fd in raw mode, as ssh does: every key,
// ^C and ^D among them, goes to the remote terminal, whose own line
// discipline makes of it what a local one would. restore puts the
// terminal back as it was; it may be called any number of times.
func makeRaw(fd int) (restore func(), err error) {
	old, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, ioctlSetTermios, &raw); err != nil {
		return nil, err
	}
	return sync.OnceFunc(func() { _ = unix.IoctlSetTermios(fd, ioctlSetTermios, old) }), nil
}

// terminalSize is the size of the terminal fd, or false.
func terminalSize(fd int) (provider.TerminalSize, bool) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return provider.TerminalSize{}, false
	}
	return provider.TerminalSize{Rows: ws.Row, Cols: ws.Col}, true
}

func isTerminal(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, ioctlGetTermios)
	return err == nil
}

// runOnTerminal runs req on a terminal in sandbox id: berth's standard
// input, in raw mode when it is a terminal, is the command's (when
// interactive), berth's window size is the terminal's, and berth exits
// with the command's exit code. The local terminal is put back on every
// way out: the command's end, an error, a panic, SIGTERM or SIGHUP.
func runOnTerminal(ctx context.Context, c *berth.Client, id string, argv []string, req berth.ExecOptions, interactive bool) (err error) {
	in, out := int(os.Stdin.Fd()), int(os.Stdout.Fd())
	size, ok := terminalSize(out)
	if !ok {
		size, _ = terminalSize(in)
	}
	req.TTY = &size
	if req.Env == nil {
		req.Env = map[string]string{}
	}
	if _, set := req.Env["TERM"]; !set {
		term := os.Getenv("TERM")
		if term == "" || term == "dumb" {
			term = "xterm-256color"
		}
		req.Env["TERM"] = term
	}
	events := make(chan berth.TerminalEvent, 64)
	restore := func() {}
	if interactive && isTerminal(in) {
		if restore, err = makeRaw(in); err != nil {
			return fmt.Errorf("raw mode: %w", err)
		}
		defer restore() // a panic's way out too
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case s := <-sigs:
				if s != syscall.SIGWINCH {
					cancel(fmt.Errorf("%v: the command goes on in the sandbox (berth sandbox inspect %s)", s, id))
					return
				}
				if sz, ok := terminalSize(out); ok {
					select {
					case events <- berth.TerminalEvent{Rows: sz.Rows, Cols: sz.Cols}:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	if interactive {
		go func() {
			buf := make([]byte, 4096)
			for {
				n, err := os.Stdin.Read(buf)
				if n > 0 {
					select {
					case events <- berth.TerminalEvent{Keys: append([]byte(nil), buf[:n]...)}:
					case <-ctx.Done():
						return
					}
				}
				if err != nil {
					return // end of input: the command reads none after
				}
			}
		}()
	}
	req.Stdout, req.Input = os.Stdout, events
	res, err := c.Sandboxes().Handle(sandboxWorkflow(id)).Exec(ctx, argv, req)
	restore() // before anything is said of the end
	if errors.Is(err, context.Canceled) && context.Cause(ctx) != context.Canceled {
		err = context.Cause(ctx)
	}
	if temporalerr.WorkflowNotFound(err) {
		return updateErr(id, err)
	}
	return runResult("sandbox "+id, res, err)
}
