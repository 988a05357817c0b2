package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
)

// acts names the activities; its methods are only used as names.
var acts *activities.Activities

// Owner labels berth puts on every sandbox, naming the workflow that owns
// it, so that sandboxes whose owner is gone can be found and destroyed.
const (
	LabelWorkflowID = "berth.workflow-id"
	LabelRunID      = "berth.run-id"
)

// Sandbox is a handle on a sandbox, kept in workflow state. It is not
// safe for use by concurrent workflow coroutines.
type Sandbox struct {
	ref     activities.Ref
	cmds    int // commands run so far, for their ids
	stopped bool
}

// New creates a sandbox and returns its handle. The caller stops it,
// usually with defer sbx.Stop(ctx).
func New(ctx workflow.Context, p Provider, opts ...Option) (*Sandbox, error) {
	cfg := config{Queue: DefaultQueue}
	for _, o := range opts {
		o(&cfg)
	}
	info := workflow.GetInfo(ctx)
	labels := map[string]string{}
	for k, v := range cfg.Spec.Labels {
		labels[k] = v
	}
	labels[LabelWorkflowID] = info.WorkflowExecution.ID
	labels[LabelRunID] = info.WorkflowExecution.RunID
	cfg.Spec.Labels = labels
	// A random id, drawn once and kept in history: a retried Create
	// finds the sandbox its first attempt made.
	var id string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newID() }).Get(&id); err != nil {
		return nil, err
	}
	cfg.Spec.ID = id
	ref, err := call[activities.Ref](ctx, activityOptions(cfg.Queue, 0), acts.Create,
		activities.CreateInput{Provider: p.Type, Spec: cfg.Spec})
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	return &Sandbox{ref: ref}, nil
}

func newID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// ID is the sandbox's id at its provider.
func (s *Sandbox) ID() string { return s.ref.ID }

// Ref is the sandbox's reference, to hand to another workflow.
func (s *Sandbox) Ref() activities.Ref { return s.ref }

// NextCommandID is the id the next command will have in the sandbox's
// journal: with activities.OutputKey, where its output will be stored,
// so that a front end can follow it while it runs.
func (s *Sandbox) NextCommandID() string { return fmt.Sprintf("%s-c%d", s.ref.ID, s.cmds+1) }

// Result is what became of a command.
type Result struct {
	ExitCode int
	Signal   string // the signal that ended it, if one did
	// Stdout and Stderr are the output, whole when small; when Truncated
	// they hold its head and tail, and Output has the whole.
	Stdout, Stderr string
	Truncated      bool
	Output         [2]activities.Output // stdout, stderr
	Duration       time.Duration
}

// Exec runs a shell command line in the sandbox and waits for it. When
// the command timed out or ran out of memory, Exec returns its result and
// an error wrapping provider.ErrTimeout or provider.ErrOutOfMemory.
func (s *Sandbox) Exec(ctx workflow.Context, cmd string, opts ...ExecOption) (Result, error) {
	return s.exec(ctx, activities.ExecInput{Shell: cmd}, opts)
}

// ExecArgv runs a program with arguments, without a shell.
func (s *Sandbox) ExecArgv(ctx workflow.Context, argv []string, opts ...ExecOption) (Result, error) {
	return s.exec(ctx, activities.ExecInput{Argv: argv}, opts)
}

func (s *Sandbox) exec(ctx workflow.Context, in activities.ExecInput, opts []ExecOption) (Result, error) {
	if err := s.usable(); err != nil {
		return Result{}, err
	}
	cfg := execConfig{timeout: DefaultExecTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	in.Sandbox, in.ID = s.ref, s.NextCommandID()
	s.cmds++
	in.Env, in.Dir, in.Timeout, in.Stdin = cfg.env, cfg.dir, cfg.timeout, cfg.stdin
	out, err := call[activities.ExecOutput](ctx, activityOptions(s.ref.Queue, cfg.timeout), acts.Exec, in)
	if err != nil {
		return Result{}, err
	}
	res := Result{
		ExitCode: out.ExitCode, Signal: out.Signal,
		Stdout: string(out.Stdout.Inline), Stderr: string(out.Stderr.Inline),
		Truncated: out.Stdout.Truncated || out.Stderr.Truncated,
		Output:    [2]activities.Output{out.Stdout, out.Stderr},
		Duration:  out.Duration,
	}
	switch {
	case out.TimedOut:
		return res, fmt.Errorf("%w: command ran past its %v timeout", provider.ErrTimeout, cfg.timeout)
	case out.OOMKilled:
		return res, fmt.Errorf("%w: the sandbox reached its memory limit", provider.ErrOutOfMemory)
	}
	return res, nil
}

// WriteFiles writes files into the workspace. Their contents enter
// workflow history, so they are bounded by activities.MaxInlineFiles.
func (s *Sandbox) WriteFiles(ctx workflow.Context, files ...provider.File) error {
	if err := s.usable(); err != nil {
		return err
	}
	_, err := call[struct{}](ctx, activityOptions(s.ref.Queue, 0), acts.WriteFiles,
		activities.WriteFilesInput{Sandbox: s.ref, Files: files})
	return err
}

// ErrTooLarge is returned with the head of a file too large to carry
// through workflow history whole.
var ErrTooLarge = errors.New("file too large to read inline")

// ReadFile reads a file of the workspace. A file larger than
// activities.DefaultInlineCap comes back as its head, with ErrTooLarge.
func (s *Sandbox) ReadFile(ctx workflow.Context, path string) ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	out, err := call[activities.Output](ctx, activityOptions(s.ref.Queue, 0), acts.ReadFile,
		activities.ReadFileInput{Sandbox: s.ref, Path: path})
	if err != nil {
		return nil, err
	}
	if out.Truncated {
		return out.Head(), fmt.Errorf("%w: %s has %d bytes", ErrTooLarge, path, out.Size)
	}
	return out.Inline, nil
}

// ListFiles lists a directory of the workspace.
func (s *Sandbox) ListFiles(ctx workflow.Context, path string) ([]provider.FileInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	return call[[]provider.FileInfo](ctx, activityOptions(s.ref.Queue, 0), acts.ListDir,
		activities.PathInput{Sandbox: s.ref, Path: path})
}

// Stop destroys the sandbox. It runs even when ctx is cancelled, so that
// a cancelled workflow still cleans up; stopping twice does nothing.
func (s *Sandbox) Stop(ctx workflow.Context) error {
	if s.stopped {
		return nil
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	_, err := call[struct{}](ctx, activityOptions(s.ref.Queue, 0), acts.Destroy, s.ref)
	if err == nil || errors.Is(err, provider.ErrLost) {
		s.stopped = true
		return nil
	}
	return fmt.Errorf("stop sandbox %s: %w", s.ref.ID, err)
}

func (s *Sandbox) usable() error {
	if s.stopped {
		return fmt.Errorf("%w: sandbox %s is stopped", provider.ErrNotFound, s.ref.ID)
	}
	return nil
}

// call runs one activity and turns its failure back into the provider
// error it was. An operation no worker picked up in time means the
// sandbox's host is gone: the sandbox is lost.
func call[T any](ctx workflow.Context, opts workflow.ActivityOptions, activity, in any) (T, error) {
	var out T
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, in).Get(ctx, &out)
	if err == nil {
		return out, nil
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
		return out, fmt.Errorf("%w: no worker serves its host (queue %s): %w", provider.ErrLost, opts.TaskQueue, err)
	}
	return out, activities.FromTemporal(err)
}
