package berth

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/randid"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/workflows"
)

// Sandbox is a standalone sandbox, named by the id of the workflow that
// keeps it. Each of its operations is one Workflow Update, sent with
// one Update id across its retries: a server restart under it is a
// pause, and the operation runs once.
type Sandbox struct {
	c  *Client
	id string
}

// ID is the sandbox's id, its workflow's.
func (s *Sandbox) ID() string { return s.id }

// Status asks the sandbox's workflow how the sandbox is.
func (s *Sandbox) Status(ctx context.Context) (SandboxStatus, error) {
	var st workflows.SandboxStatus
	if err := s.c.query(ctx, s.id, "", workflows.QuerySandbox, &st); err != nil {
		return SandboxStatus{}, err
	}
	return statusOf(s.id, st), nil
}

// update runs the Update name on the sandbox's workflow.
func (s *Sandbox) update(ctx context.Context, name string, out any, args ...any) error {
	return s.c.update(ctx, s.id, "", name, out, args...)
}

// File is a file to write into a workspace.
type File struct {
	// Path is in the workspace: relative to it, or absolute under it.
	Path string
	Data []byte
	// Mode holds the permission bits; zero means 0644.
	Mode fs.FileMode
}

// WriteFiles writes files into the workspace, creating the directories
// they need, all or none of them. Files larger together than an Update
// carries go as a tar stream (Import).
func (s *Sandbox) WriteFiles(ctx context.Context, files ...File) error {
	total := 0
	wire := make([]provider.File, len(files))
	for i, f := range files {
		total += len(f.Data)
		wire[i] = provider.File{Path: f.Path, Data: f.Data, Mode: f.Mode}
	}
	if total <= transfer.MaxInlineFiles {
		return s.update(ctx, workflows.UpdateWriteFiles, nil, workflows.WriteFilesRequest{Files: wire})
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for _, f := range files {
			mode := f.Mode.Perm()
			if mode == 0 {
				mode = 0o644
			}
			if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: int64(mode), Size: int64(len(f.Data)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := tw.Write(f.Data); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	err := s.Import(ctx, pr)
	pr.CloseWithError(err)
	return err
}

// ReadFile returns the file at path in the workspace, whole
// (FileNotFound when there is none).
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	var b bytes.Buffer
	err := s.c.readFile(ctx, s.id, path, &b)
	return b.Bytes(), err
}

// CopyFile writes the file at path in the workspace to w, whole, as it
// comes: for a file too large to hold.
func (s *Sandbox) CopyFile(ctx context.Context, path string, w io.Writer) error {
	return s.c.readFile(ctx, s.id, path, w)
}

// Import unpacks the tar stream r into the workspace, over what is
// there, whatever its size: all of it, or nothing when an entry is bad.
func (s *Sandbox) Import(ctx context.Context, r io.Reader) error { return s.c.importTree(ctx, s.id, r) }

// Export writes to w a tar stream of the file or directory at path in
// the workspace, its entries named from path's base name. It comes from
// the sandbox: treat it as hostile.
func (s *Sandbox) Export(ctx context.Context, path string, w io.Writer) error {
	return s.c.exportTree(ctx, s.id, path, w)
}

// Snapshot snapshots the workspace and returns the snapshot's id, which
// SandboxOptions.FromSnapshot takes.
func (s *Sandbox) Snapshot(ctx context.Context) (string, error) {
	var out workflows.SnapshotResponse
	err := s.update(ctx, workflows.UpdateSnapshot, &out)
	return out.Snapshot, err
}

// Fork makes a new sandbox whose workspace is a copy of this one's and
// returns it once it exists. It has this one's settings but those opts
// sets: ID names it (empty: a random sbx-...), a non-zero field replaces
// the parent's, Env and Labels are added to the parent's.
// FromSnapshot and Queue are not taken.
func (s *Sandbox) Fork(ctx context.Context, opts SandboxOptions) (*Sandbox, error) {
	if opts.ID == "" {
		opts.ID = "sbx-" + randid.Hex(6)
	}
	in := opts.input()
	req := workflows.ForkRequest{
		ID: opts.ID, Provider: opts.Provider, Image: opts.Image, Env: opts.Env, Labels: opts.Labels,
		Resources: in.Resources, MaxLifetime: opts.Lifetime, IdleTimeout: opts.IdleTimeout, HibernateAfter: opts.HibernateAfter,
	}
	if opts.Network.Mode != NetworkNone {
		req.Network = &opts.Network
	}
	var out workflows.ForkResponse
	if err := s.update(ctx, workflows.UpdateFork, &out, req); err != nil {
		return nil, err
	}
	fork := &Sandbox{c: s.c, id: out.ID}
	if _, err := fork.waitReady(ctx); err != nil {
		return nil, err
	}
	return fork, nil
}

// Switch moves the sandbox to another provider, or image (empty: the
// provider's default): its workspace goes along, its processes do not.
func (s *Sandbox) Switch(ctx context.Context, provider, image string) error {
	return s.update(ctx, workflows.UpdateSwitch, nil, workflows.SwitchRequest{Provider: provider, Image: image})
}

// SetNetwork replaces the sandbox's network policy, in place for its new
// connections. A provider that cannot change a running sandbox's policy
// fails with Unsupported and leaves it as it was: Hibernate first, and
// the sandbox wakes under the new one.
func (s *Sandbox) SetNetwork(ctx context.Context, n Network) error {
	if err := n.Validate(); err != nil {
		return err
	}
	return s.update(ctx, workflows.UpdateNetwork, nil, n)
}

// Pause freezes the sandbox now; its next command resumes it.
func (s *Sandbox) Pause(ctx context.Context) error { return s.update(ctx, workflows.UpdatePause, nil) }

// Resume resumes a paused or hibernated sandbox.
func (s *Sandbox) Resume(ctx context.Context) error {
	return s.update(ctx, workflows.UpdateResume, nil)
}

// Hibernate checkpoints the sandbox and frees everything it holds; its
// next command restores it.
func (s *Sandbox) Hibernate(ctx context.Context) error {
	return s.update(ctx, workflows.UpdateHibernate, nil)
}

// Stop destroys the sandbox and returns once its workflow has ended.
func (s *Sandbox) Stop(ctx context.Context) error {
	if err := s.update(ctx, workflows.UpdateStop, nil); err != nil {
		return err
	}
	err := s.c.retry(ctx, func(ctx context.Context) error {
		return s.c.temporal.GetWorkflow(ctx, s.id, "").Get(ctx, nil)
	})
	return s.c.unavailable(err, "stop "+s.id, true, "")
}

// TerminalSize is a terminal's size; zero fields mean 24 rows, 80
// columns.
type TerminalSize = provider.TerminalSize

// TerminalEvent is input to a command on a terminal: keys typed, or a
// new size (Rows and Cols non-zero).
type TerminalEvent = transfer.TerminalEvent

// ExecOptions are how a command runs. A zero field means the default.
type ExecOptions struct {
	// Shell, when set, is a command line the sandbox's sh runs, in place
	// of argv (which must then be empty).
	Shell string
	// Stdout and Stderr receive the command's output as it is produced;
	// nil keeps it in the Result instead.
	Stdout, Stderr io.Writer
	// Stdin is the command's whole standard input. It enters the
	// workflow's history: keep it small.
	Stdin []byte
	// Env is added to the sandbox's environment.
	Env map[string]string
	// Dir is the working directory, in the workspace.
	Dir string
	// Timeout ends the command (Kind Timeout); zero means
	// DefaultExecTimeout.
	Timeout time.Duration
	// MaxOutput caps what is stored of each stream; zero means berth's
	// default (transfer.DefaultMaxOutput).
	MaxOutput int64
	// TTY runs the command on a terminal of this size, its output all on
	// Stdout; Input carries its keys and resizes until it ends.
	TTY   *TerminalSize
	Input <-chan TerminalEvent
}

func (o ExecOptions) request(argv []string) workflows.ExecRequest {
	return workflows.ExecRequest{Argv: argv, Shell: o.Shell, Env: o.Env, Dir: o.Dir, Timeout: o.Timeout, Stdin: o.Stdin, MaxOutput: o.MaxOutput, TTY: o.TTY}
}

// Result is what became of a command.
type Result struct {
	// ExitCode is the command's exit status; Signal the signal that
	// ended it, if one did.
	ExitCode int
	Signal   string
	// Kind says why the command did not run to its own end, when it did
	// not (Timeout, OutOfMemory, CommandNotFound...), Message more.
	Kind     Kind
	Message  string
	Duration time.Duration
	// Stdout and Stderr are the command's output when no writer took it
	// (Exec, Wait).
	Stdout, Stderr []byte
	// StdoutSize and StderrSize are the lengths of the streams;
	// StdoutDropped and StderrDropped what went past MaxOutput, or was
	// lost while no worker was attached, and is missing from them.
	StdoutSize, StderrSize       int64
	StdoutDropped, StderrDropped int64
	// Instance is the provider's name of the sandbox it ran in.
	Instance string
}

// OK says the command ran to its end and exited 0.
func (r *Result) OK() bool { return r.ExitCode == 0 && r.Kind == "" && r.Signal == "" }

func resultOf(out workflows.RunOutput) *Result {
	return &Result{
		ExitCode: out.ExitCode, Signal: out.Signal, Kind: out.Kind, Message: out.Message, Duration: out.Duration,
		StdoutSize: out.Stdout.Size, StderrSize: out.Stderr.Size,
		StdoutDropped: out.Stdout.Dropped, StderrDropped: out.Stderr.Dropped,
		Instance: out.Sandbox,
	}
}

// Exec runs argv in the sandbox and returns what became of it, its
// output streamed to opts' writers as it is produced, or kept in the
// Result. Its output is whole, or the error wraps ErrIncomplete (the
// Result then says how the command ended). A command that exits non-zero
// is no error: its Result says so.
func (s *Sandbox) Exec(ctx context.Context, argv []string, opts ExecOptions) (*Result, error) {
	if opts.TTY != nil {
		out := opts.Stdout
		var buf bytes.Buffer
		if out == nil {
			out = &buf
		}
		input := opts.Input
		if input == nil {
			input = make(chan TerminalEvent)
		}
		o, err := s.c.execTerminal(ctx, s.id, opts.request(argv), out, input)
		res := resultOf(o)
		if opts.Stdout == nil {
			res.Stdout = buf.Bytes()
		}
		return res, err
	}
	cmd, err := s.Start(ctx, argv, opts)
	if err != nil {
		return nil, err
	}
	return cmd.Wait(ctx)
}

// Start starts argv in the sandbox and returns once the sandbox has
// accepted it, without waiting for it: it goes on whether or not anyone
// follows it. Its Command's Wait writes to opts' writers.
func (s *Sandbox) Start(ctx context.Context, argv []string, opts ExecOptions) (*Command, error) {
	if opts.TTY != nil {
		return nil, fmt.Errorf("%w: a command on a terminal runs with Exec", errdefs.ErrBadInput)
	}
	cmd, err := s.c.startExec(ctx, s.id, opts.request(argv))
	if err != nil {
		return nil, err
	}
	cmd.stdout, cmd.stderr = opts.Stdout, opts.Stderr
	return cmd, nil
}

// Attach returns the command commandID (Command.ID, or one that
// SandboxStatus.Running lists), running or among the last 64 that
// ended, to follow.
func (s *Sandbox) Attach(ctx context.Context, commandID string) (*Command, error) {
	return s.c.attach(ctx, s.id, commandID)
}

// Signal sends sig (INT, TERM, KILL, HUP, QUIT, USR1, USR2, with or
// without SIG) to the running command commandID, its process group and
// session: Command.Signal without attaching to it first.
func (s *Sandbox) Signal(ctx context.Context, commandID, sig string) error {
	return s.c.signalCommand(ctx, s.id, commandID, sig)
}

// Wait waits for the command to end and returns what became of it, its
// output written as it is produced to the writers Start was given, or
// kept in the Result.
func (cmd *Command) Wait(ctx context.Context) (*Result, error) {
	var bufs [2]bytes.Buffer
	stdout, stderr := cmd.stdout, cmd.stderr
	if stdout == nil {
		stdout = &bufs[0]
	}
	if stderr == nil {
		stderr = &bufs[1]
	}
	res, err := cmd.Follow(ctx, stdout, stderr)
	if cmd.stdout == nil {
		res.Stdout = bufs[0].Bytes()
	}
	if cmd.stderr == nil {
		res.Stderr = bufs[1].Bytes()
	}
	return res, err
}

// Kill ends the command with SIGKILL.
func (cmd *Command) Kill(ctx context.Context) error { return cmd.Signal(ctx, "KILL") }
