package tools

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// OnSandbox is the workspace of a sandbox, for a workflow: each
// operation is the handle's, on ctx. Each command also takes execOpts
// (sandbox.OnStart, to follow its output live, say).
func OnSandbox(ctx workflow.Context, sbx *sandbox.Sandbox, execOpts ...sandbox.ExecOption) Workspace {
	return onSandbox{ctx: ctx, sbx: sbx, execOpts: execOpts}
}

// terminalType is the TERM of a command on a terminal: the sandbox sets
// none, and without one programs (ls --color=auto) act as on a dumb
// terminal.
const terminalType = "xterm-256color"

type onSandbox struct {
	ctx      workflow.Context
	sbx      *sandbox.Sandbox
	execOpts []sandbox.ExecOption
}

func (s onSandbox) Exec(command string, o ExecOptions) (ExecResult, error) {
	opts := slices.Clone(s.execOpts)
	if o.Timeout > 0 {
		opts = append(opts, sandbox.WithExecTimeout(o.Timeout))
	}
	if o.TTY {
		// No input stream: the terminal gets no keys.
		opts = append(opts, sandbox.WithTerminal(provider.TerminalSize{Rows: TerminalRows, Cols: TerminalCols}, ""),
			sandbox.WithExecEnv(map[string]string{"TERM": terminalType}))
	}
	res, err := s.sbx.Exec(s.ctx, command, opts...)
	out := ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Truncated: res.Truncated}
	if errors.Is(err, errdefs.ErrTimeout) {
		out.TimedOut, err = true, nil
	}
	return out, lostCall(err)
}

func (s onSandbox) ReadFile(path string) ([]byte, error) {
	b, err := s.sbx.ReadFile(s.ctx, path)
	if errors.Is(err, sandbox.ErrTooLarge) {
		return b, errors.Join(ErrTooLarge, err)
	}
	return b, lostCall(err)
}

func (s onSandbox) WriteFiles(files ...provider.File) error {
	return lostCall(s.sbx.WriteFiles(s.ctx, files...))
}

func (s onSandbox) ListFiles(dir string) ([]provider.FileInfo, error) {
	fi, err := s.sbx.ListFiles(s.ctx, dir)
	return fi, lostCall(err)
}

func (s onSandbox) Remove(path string) error { return lostCall(s.sbx.Remove(s.ctx, path)) }

// lostCall says to the model what a call that found the sandbox lost
// (its host gone, and the handle re-created it from its last
// checkpoint) leaves: the call did not complete and is not run again,
// the workspace is back at the checkpoint, and what was done since is
// gone. Without it the model would read the handle's error, whose
// Temporal wrappers say none of that plainly, and go on as if its
// earlier files were there.
func lostCall(err error) error {
	var lost *sandbox.LostError
	if !errors.As(err, &lost) {
		return err
	}
	var b strings.Builder
	if lost.NotStarted {
		b.WriteString(" (its host is gone) before this call reached it: the call did not run, and it is not run now")
	} else {
		b.WriteString(" (its host is gone) while this call was under way: " +
			"the call did not complete, whatever it did is gone, and it is not run again")
	}
	switch {
	case !lost.Recovered:
		b.WriteString("; the sandbox could not be made again, and later calls may fail too")
	case lost.Checkpoint != "":
		fmt.Fprintf(&b, "; a new sandbox holds the workspace of its last checkpoint (%s)", lost.Checkpoint)
	default:
		b.WriteString("; a new sandbox holds the workspace as it was first made (there was no checkpoint)")
	}
	if len(lost.Lost) > 0 {
		fmt.Fprintf(&b, ", without what was done since, which is gone too: %s", strings.Join(lost.Lost, "; "))
	}
	b.WriteString(". Look at the workspace and redo what is still needed.")
	return fmt.Errorf("%w%s", errdefs.ErrSandboxLost, b.String())
}
