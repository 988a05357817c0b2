package tools

import (
	"errors"
	"slices"

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
	return out, err
}

func (s onSandbox) ReadFile(path string) ([]byte, error) {
	b, err := s.sbx.ReadFile(s.ctx, path)
	if errors.Is(err, sandbox.ErrTooLarge) {
		return b, errors.Join(ErrTooLarge, err)
	}
	return b, err
}

func (s onSandbox) WriteFiles(files ...provider.File) error {
	return s.sbx.WriteFiles(s.ctx, files...)
}

func (s onSandbox) ListFiles(dir string) ([]provider.FileInfo, error) {
	return s.sbx.ListFiles(s.ctx, dir)
}

func (s onSandbox) Remove(path string) error { return s.sbx.Remove(s.ctx, path) }
