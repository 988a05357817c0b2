package berth

import (
	"context"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/workflows"
)

// RunOptions are a one-shot job: files in, one command, its output out,
// and the sandbox destroyed afterwards, whatever happens. A zero field
// means the default.
type RunOptions struct {
	// ID names the run (its workflow id); empty means a random run-....
	// Starting an ID that runs finds it.
	ID   string
	Argv []string
	// Provider is where its sandbox lives; empty means DefaultProvider.
	Provider, Image string
	// Files are written into the workspace first, at most 2 MiB in all.
	Files []File
	Env   map[string]string
	// Stdin is the command's whole standard input; it enters history.
	Stdin []byte
	// Timeout ends the command; zero means DefaultExecTimeout.
	Timeout   time.Duration
	MaxOutput int64
	CPU       float64
	Memory    int64
	Disk      int64
	Pids      int64
	// Network is what the command may reach beyond its loopback; the
	// zero policy is loopback only.
	Network Network
	// Queue is the task queue of the workers that serve it; empty means
	// DefaultQueue.
	Queue string
}

// Run is a one-shot run, named by its workflow's id.
type Run struct {
	c  *Client
	id string
}

// ID is the run's id, its workflow's.
func (r *Run) ID() string { return r.id }

// maxMemoCommand bounds the command line a run keeps in its memo for
// listings: the memo is stored with every visibility record.
const maxMemoCommand = 256

// Run starts a one-shot run and returns at once: Wait or Follow it.
// Sent again after a server restart, the start starts it once.
func (c *Client) Run(ctx context.Context, opts RunOptions) (*Run, error) {
	if opts.ID == "" {
		opts.ID = NewID("run-")
	}
	if opts.Provider == "" {
		opts.Provider = DefaultProvider
	}
	if opts.Queue == "" {
		opts.Queue = DefaultQueue
	}
	in := workflows.RunInput{
		Provider: opts.Provider, Image: opts.Image, Env: opts.Env, Argv: opts.Argv, Timeout: opts.Timeout,
		Stdin: opts.Stdin, MaxOutput: opts.MaxOutput,
		Resources: provider.Resources{CPU: opts.CPU, Memory: opts.Memory, Disk: opts.Disk, Pids: opts.Pids},
		Network:   opts.Network,
	}
	for _, f := range opts.Files {
		in.Files = append(in.Files, provider.File{Path: f.Path, Data: f.Data, Mode: f.Mode})
	}
	sent := false
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: opts.ID, TaskQueue: opts.Queue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
			Memo:                     map[string]any{workflows.MemoCommand: shorten(strings.Join(opts.Argv, " "), maxMemoCommand)},
			StaticSummary:            workflows.RunSummary(in),
		}, workflows.RunWorkflowName, in)
		sent = true
		return err
	})
	if err = c.unavailable(err, "start run "+opts.ID, sent, ""); err != nil {
		return nil, err
	}
	return &Run{c: c, id: opts.ID}, nil
}

// RunHandle returns the run id names, without asking the server: to
// follow, wait for or cancel a run started elsewhere.
func (c *Client) RunHandle(id string) *Run { return &Run{c: c, id: id} }

// Follow writes the run's output to stdout and stderr, from its start,
// as it is produced, and returns what became of its command: a Result,
// zero when nothing is known, even with an error. Its output is whole,
// or the error wraps ErrIncomplete. A run that could not run its command
// at all fails with its kind (KindOf).
func (r *Run) Follow(ctx context.Context, stdout, stderr io.Writer) (*Result, error) {
	out, err := r.c.followRun(ctx, r.id, stdout, stderr)
	return resultOf(out), err
}

// Wait waits for the run's command to end and returns what became of
// it, its output in the Result.
func (r *Run) Wait(ctx context.Context) (*Result, error) {
	var o, e strings.Builder
	res, err := r.Follow(ctx, &o, &e)
	res.Stdout, res.Stderr = []byte(o.String()), []byte(e.String())
	return res, err
}

// Cancel asks the run to end: its workflow destroys its sandbox on its
// way out.
func (r *Run) Cancel(ctx context.Context) error {
	err := r.c.retry(ctx, func(ctx context.Context) error { return r.c.temporal.CancelWorkflow(ctx, r.id, "") })
	return r.c.unavailable(err, "cancel run "+r.id, true, "")
}

// RunInfo is a run as a listing shows it, from the server's visibility
// store.
type RunInfo struct {
	ID string
	// Status is its workflow's: "running", "completed", "failed",
	// "canceled", "terminated"...
	Status  string
	Created time.Time
	// Command is its command line, cut at 256 bytes.
	Command string
	// Ended says its command has ended, and Exit how.
	Ended bool
	Exit  RunExit
}

// RunExit is how a run's command ended.
type RunExit struct {
	ExitCode int
	Signal   string
	Kind     Kind
}

// Runs lists the runs, those that have ended too when opts.All.
func (c *Client) Runs(ctx context.Context, opts ListOptions) ([]RunInfo, error) {
	return listWorkflows(ctx, c, workflows.RunWorkflowName, opts.All, runInfoOf)
}

// runInfoOf reads a run's listing: its command and how it ended are in
// its memo, its input is not in the visibility store.
func runInfoOf(e *workflowpb.WorkflowExecutionInfo) RunInfo {
	dc := converter.GetDefaultDataConverter()
	r := RunInfo{ID: e.Execution.GetWorkflowId(), Status: strings.ToLower(e.Status.String()), Created: e.GetStartTime().AsTime()}
	memo := e.GetMemo().GetFields()
	if p := memo[workflows.MemoCommand]; p != nil {
		_ = dc.FromPayload(p, &r.Command)
	}
	var exit workflows.RunExit
	if p := memo[workflows.MemoExit]; p != nil && dc.FromPayload(p, &exit) == nil {
		r.Ended, r.Exit = true, RunExit{ExitCode: exit.ExitCode, Signal: exit.Signal, Kind: exit.Kind}
	}
	return r
}

// IsRun says whether a workflow type name is a run's, under its name or
// a legacy one.
func IsRun(workflowType string) bool { return isKind(workflowType, workflows.RunWorkflowName) }

func isKind(name, kind string) bool {
	if name == kind {
		return true
	}
	for _, old := range workflows.OldNames(kind) {
		if name == old {
			return true
		}
	}
	return false
}

// shorten cuts s to at most n bytes, on a rune boundary, marking the cut.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
