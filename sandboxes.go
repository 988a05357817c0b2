package berth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
	"github.com/berth-dev/berth/internal/randid"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// Defaults a sandbox, a run and their commands get from a zero field.
const (
	// DefaultProvider is where a sandbox lives when SandboxOptions names
	// no provider.
	DefaultProvider = "linux"
	// DefaultQueue is the task queue of berth's workers.
	DefaultQueue = "berth"
	// DefaultIdleTimeout and DefaultHibernateAfter are a sandbox's idle
	// bounds when its options leave them zero.
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultHibernateAfter = 30 * time.Minute
	// DefaultLifetime is a sandbox's lifetime when its options leave it
	// zero.
	DefaultLifetime = 24 * time.Hour
	// DefaultHostTimeout is how long an operation waits for a sandbox's
	// host when SandboxOptions.HostTimeout is zero; MinHostTimeout and
	// MaxHostTimeout bound one that is set.
	DefaultHostTimeout = time.Minute
	MinHostTimeout     = 2 * time.Second
	MaxHostTimeout     = 24 * time.Hour
	// DefaultExecTimeout bounds a command whose options set no timeout.
	DefaultExecTimeout = 10 * time.Minute
	// Never, as an idle timeout or hibernation delay, turns it off.
	Never time.Duration = -1
)

// State is what a sandbox is doing.
type State string

// A sandbox's states. A paused or hibernated sandbox wakes for its next
// command.
const (
	StateCreating   State = "creating" // its workflow is making it
	StateRunning    State = "running"
	StatePaused     State = "paused"     // frozen: no CPU, memory kept
	StateHibernated State = "hibernated" // checkpointed and destroyed
	StateLost       State = "lost"
	StateStopped    State = "stopped"
)

// SandboxOptions are a new sandbox's settings. A zero field means the
// default.
type SandboxOptions struct {
	// ID names the sandbox (its workflow id); empty means a random
	// sbx-.... Creating an ID that exists with the same settings finds
	// that sandbox; with other settings, or once it has ended, Create
	// fails with AlreadyExists.
	ID string
	// Provider is where the sandbox lives (Providers lists them); empty
	// means DefaultProvider.
	Provider string
	// Image is the image of its root filesystem; empty means the
	// provider's.
	Image string
	// Env is set for every command.
	Env    map[string]string
	Labels map[string]string
	// CPU is in cores; Memory and Disk (the workspace's size) in bytes;
	// Pids the most processes.
	CPU          float64
	Memory, Disk int64
	Pids         int64
	// IdleTimeout pauses the sandbox after this long without a command,
	// HibernateAfter checkpoints it and frees what it holds; Never turns
	// either off. Lifetime destroys it whatever it does.
	IdleTimeout, HibernateAfter, Lifetime time.Duration
	// Network is what the sandbox may reach beyond its loopback; the
	// zero policy is loopback only. A provider that cannot enforce it
	// refuses the sandbox (Unsupported).
	Network Network
	// FromSnapshot fills the workspace from a snapshot.
	FromSnapshot string
	// Hibernated starts the sandbox hibernated: Create makes nothing at
	// the provider (it checks that FromSnapshot is in the store), and
	// the first command or file operation makes the sandbox, from
	// FromSnapshot, as a hibernated sandbox wakes.
	Hibernated bool
	// Checkpoint says when the workspace is checkpointed besides before
	// hibernating: a sandbox whose host is lost comes back from its last
	// checkpoint, and what changed after is lost. The zero policy
	// checkpoints only before hibernating.
	Checkpoint CheckpointPolicy
	// HostTimeout is how long an operation waits for the sandbox's host
	// to take it before the sandbox is taken for lost and re-created on
	// another host from its last checkpoint (docs/cluster.md); zero
	// means DefaultHostTimeout, otherwise within MinHostTimeout and
	// MaxHostTimeout. The host's worker pauses the sandbox on its own
	// once it has been cut from the server for half of it.
	HostTimeout time.Duration
	// Queue is the task queue of the workers that serve it; empty means
	// DefaultQueue.
	Queue string
}

// input is the wire form of the options.
func (o SandboxOptions) input() workflows.SandboxInput {
	return workflows.SandboxInput{
		Provider: o.Provider, Image: o.Image, Env: o.Env, Labels: o.Labels,
		Resources:   provider.Resources{CPU: o.CPU, Memory: o.Memory, Disk: o.Disk, Pids: o.Pids},
		MaxLifetime: o.Lifetime, IdleTimeout: o.IdleTimeout, HibernateAfter: o.HibernateAfter,
		Network: o.Network, FromSnapshot: o.FromSnapshot, Hibernated: o.Hibernated, Checkpoint: o.Checkpoint.wire(), HostTimeout: o.HostTimeout,
	}
}

func optionsOf(id string, in workflows.SandboxInput) SandboxOptions {
	o := SandboxOptions{
		ID: id, Provider: in.Provider, Image: in.Image, Env: in.Env, Labels: in.Labels,
		CPU: in.Resources.CPU, Memory: in.Resources.Memory, Disk: in.Resources.Disk, Pids: in.Resources.Pids,
		IdleTimeout: in.IdleTimeout, HibernateAfter: in.HibernateAfter, Lifetime: in.MaxLifetime,
		Network: in.Network, FromSnapshot: in.FromSnapshot, Hibernated: in.Hibernated, Checkpoint: checkpointPolicyOf(in.Checkpoint),
		HostTimeout: in.HostTimeout,
	}
	if in.OwnSnapshot {
		o.FromSnapshot = "" // a fork's copy of its parent, berth's own
	}
	return o
}

// Network is a sandbox's network policy: none (loopback only, the
// default), allow with hosts, wildcards, CIDRs and ports, or open. See
// provider.Network; NetworkPreset names ready-made ones.
type Network = provider.Network

// CheckpointPolicy says when a running sandbox's workspace is
// checkpointed besides before it hibernates; each rule that is set
// applies. A sandbox whose host is lost comes back from its last
// checkpoint. See docs/workflows.md for what each costs.
type CheckpointPolicy struct {
	// Every checkpoints after every Every commands, writes or removals.
	Every int
	// Interval checkpoints at most this long after the first change not
	// yet checkpointed; at least a second.
	Interval time.Duration
	// Idle checkpoints once no command has come for this long, if
	// something changed; at least a second.
	Idle time.Duration
}

// Validate checks the policy: no rule negative, Interval and Idle, when
// set, at least a second. Create checks it too.
func (p CheckpointPolicy) Validate() error { return p.wire().Validate() }

func (p CheckpointPolicy) wire() sandbox.CheckpointPolicy {
	return sandbox.CheckpointPolicy{Every: p.Every, Interval: p.Interval, Idle: p.Idle}
}

func checkpointPolicyOf(p sandbox.CheckpointPolicy) CheckpointPolicy {
	return CheckpointPolicy{Every: p.Every, Interval: p.Interval, Idle: p.Idle}
}

// The network policies' modes.
const (
	NetworkNone  = provider.NetworkNone
	NetworkAllow = provider.NetworkAllow
	NetworkOpen  = provider.NetworkOpen
)

// NetworkPreset returns the ready-made policy named name ("registries":
// the public package registries, over HTTPS), and whether there is one.
func NetworkPreset(name string) (Network, bool) { return provider.NetworkPreset(name) }

// Sandboxes creates and finds standalone sandboxes: each lives in a
// workflow of its own, whose Updates are its operations
// (docs/protocol.md).
type Sandboxes struct {
	c *Client
}

// Sandboxes returns the client's sandboxes.
func (c *Client) Sandboxes() *Sandboxes { return &Sandboxes{c: c} }

// Create makes a sandbox and returns once it exists, or fails with why
// it could not be made (BadInput for bad settings, NotFound for an
// unknown provider...). Sent again after a server restart, it finds
// the sandbox its first try started.
func (s *Sandboxes) Create(ctx context.Context, opts SandboxOptions) (*Sandbox, error) {
	if opts.ID == "" {
		opts.ID = "sbx-" + randid.Hex(6)
	}
	if opts.Provider == "" {
		opts.Provider = DefaultProvider
	}
	if opts.Queue == "" {
		opts.Queue = DefaultQueue
	}
	if err := provider.ValidateID(opts.ID); err != nil {
		return nil, err
	}
	// Bad settings fail here, at once, not in the workflow.
	if err := opts.input().Validate(); err != nil {
		return nil, err
	}
	if err := s.start(ctx, opts); err != nil {
		return nil, err
	}
	sb := s.Handle(opts.ID)
	if _, err := sb.waitReady(ctx); err != nil {
		return nil, err
	}
	return sb, nil
}

// start starts a sandbox's workflow. Sent again after a server restart,
// the start finds the workflow its first try started.
func (s *Sandboxes) start(ctx context.Context, opts SandboxOptions) error {
	c, in, name := s.c, opts.input(), opts.ID
	started := false
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: name, TaskQueue: opts.Queue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
			WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
			// Else the SDK answers with the sandbox already there.
			WorkflowExecutionErrorWhenAlreadyStarted: true,
			StaticSummary:                            workflows.SandboxSummary(in),
		}, workflows.SandboxWorkflowName, in)
		var exists *serviceerror.WorkflowExecutionAlreadyStarted
		if started && errors.As(err, &exists) {
			return nil // our own first try
		}
		started = started || err == nil || temporalerr.ServerUnavailable(err)
		return err
	})
	var exists *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &exists) {
		// The same settings again are a no-op; others an error.
		err = c.retry(ctx, func(ctx context.Context) error { return workflows.CheckExisting(ctx, c.temporal, name, in) })
	}
	if err = c.unavailable(err, "create sandbox "+name, started, ""); err != nil {
		return fmt.Errorf("create sandbox %s: %w", name, err)
	}
	return nil
}

// Handle returns the sandbox id names, without asking the server
// whether it exists: its first operation says so (NotFound). id may
// also be the workflow of a coding agent's session, whose sandbox
// serves Exec, the file operations and Status.
func (s *Sandboxes) Handle(id string) *Sandbox { return &Sandbox{c: s.c, id: id} }

// Get returns the sandbox id names, once the server says it is there:
// NotFound otherwise.
func (s *Sandboxes) Get(ctx context.Context, id string) (*Sandbox, error) {
	sb := s.Handle(id)
	if _, err := sb.Status(ctx); err != nil {
		return nil, err
	}
	return sb, nil
}

// SandboxInfo is a sandbox as a listing shows it, from the server's
// visibility store: no call reaches its workflow.
type SandboxInfo struct {
	ID       string
	Provider string
	// State is the sandbox's, or for an ended one its workflow's
	// ("completed", "failed", "terminated"...).
	State   State
	Created time.Time
	// ForkOf is the sandbox this one was forked from, if any.
	ForkOf string
	// Queue is the task queue of the host that holds it.
	Queue string
	// Running says its workflow runs.
	Running bool
}

// ListOptions choose what a listing includes.
type ListOptions struct {
	// All includes those that have ended.
	All bool
}

// List lists the sandboxes, those that have ended too when opts.All.
func (s *Sandboxes) List(ctx context.Context, opts ListOptions) ([]SandboxInfo, error) {
	dc := converter.GetDefaultDataConverter()
	return listWorkflows(ctx, s.c, workflows.SandboxWorkflowName, opts.All, func(e *workflowpb.WorkflowExecutionInfo) SandboxInfo {
		r := SandboxInfo{ID: e.Execution.GetWorkflowId(), Created: e.GetStartTime().AsTime(),
			Running: e.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
		memo := e.GetMemo().GetFields()
		if p := memo[workflows.MemoProvider]; p != nil {
			_ = dc.FromPayload(p, &r.Provider)
		}
		if p := memo[workflows.MemoState]; p != nil {
			_ = dc.FromPayload(p, &r.State)
		}
		if p := memo[workflows.MemoQueue]; p != nil {
			_ = dc.FromPayload(p, &r.Queue)
		}
		if !r.Running {
			r.State = State(strings.ToLower(e.Status.String()))
		}
		// A standalone sandbox owns itself; a fork started by another
		// sandbox's workflow names it.
		r.ForkOf = e.GetParentExecution().GetWorkflowId()
		return r
	})
}

// listWorkflows lists the workflows of type kind (or a legacy name of
// it), running ones unless all, as rows made by row, through every page
// of the answer, riding out server restarts.
func listWorkflows[R any](ctx context.Context, c *Client, kind string, all bool, row func(*workflowpb.WorkflowExecutionInfo) R) ([]R, error) {
	query := "WorkflowType IN (" + strings.Join(typeNames(kind), ", ") + ")"
	if !all {
		query += " AND ExecutionStatus = 'Running'"
	}
	var rows []R
	err := c.retry(ctx, func(ctx context.Context) error {
		rows = nil
		var token []byte
		for {
			resp, err := c.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
			if err != nil {
				return err
			}
			for _, e := range resp.Executions {
				rows = append(rows, row(e))
			}
			if token = resp.NextPageToken; len(token) == 0 {
				return nil
			}
		}
	})
	return rows, c.unavailable(err, "list "+kind, false, "")
}

// typeNames are kind and its legacy names, quoted for a visibility
// query: a sandbox started before berth.Sandbox is still a sandbox.
func typeNames(kind string) []string {
	names := []string{"'" + kind + "'"}
	for _, old := range workflows.OldNames(kind) {
		names = append(names, "'"+old+"'")
	}
	return names
}

// SandboxStatus is a sandbox's state, as its workflow keeps it.
type SandboxStatus struct {
	// ID is the sandbox's (its workflow's); Instance the provider's name
	// of what it runs in now, empty while it is being made.
	ID, Instance string
	Provider     string
	Image        string
	State        State
	// Generation counts the instances it has had (a hibernation, a
	// switch or a recovery makes a new one); Commands the commands run.
	Generation, Commands int
	// Checkpoint is the snapshot it resumes from after hibernating.
	Checkpoint string
	Created    time.Time
	LastActive time.Time
	// Held is how long it has existed (running or paused) up to
	// HeldSince, when it has been held since without a break; Active and
	// ActiveSince the same for the time commands ran. Add the time since
	// to each.
	Held, Active           time.Duration
	HeldSince, ActiveSince time.Time
	// OutputStored is the command output stored so far, counted against
	// its output budget.
	OutputStored int64
	// Network is its network policy now.
	Network Network
	// Options are the settings it was created with, as switches and
	// forks changed them.
	Options SandboxOptions
	// Running are the ids of the commands under way (Start's, Attach
	// takes them).
	Running []string
	// MovesAt is when it moves to a new instance on its provider
	// because the provider's service would end the one it is in (a
	// hosted service's hard limit); zero where there is no such limit.
	MovesAt time.Time
	// NotYetMade says that it started hibernated (SandboxOptions.Hibernated)
	// and no operation woke it yet: Instance is empty, and the first
	// operation makes it, from Checkpoint (the snapshot it was asked
	// from).
	NotYetMade bool
}

func statusOf(id string, st workflows.SandboxStatus) SandboxStatus {
	out := SandboxStatus{
		ID: id, Instance: st.ID, Provider: st.Provider, Image: st.Image, State: State(st.State),
		Generation: st.Generation, Commands: st.Commands, Checkpoint: st.Checkpoint,
		Created: st.Created, LastActive: st.LastActive,
		Held: st.Held, HeldSince: st.HeldSince, Active: st.Active, ActiveSince: st.ActiveSince,
		OutputStored: st.OutputStored, Options: optionsOf(id, st.Config), MovesAt: st.MovesAt,
		Network: st.Network, NotYetMade: st.NotYetMade,
	}
	if out.Provider == "" {
		out.Provider, out.State, out.Network = st.Config.Provider, StateCreating, st.Config.Network
	}
	if out.Image == "" {
		out.Image = st.Config.Image
	}
	for _, r := range st.Running {
		out.Running = append(out.Running, r.Update)
	}
	return out
}

// waitReady waits until the sandbox's workflow has made its sandbox, or
// ended trying, with its berth.ready Update: one call, answered as soon
// as the sandbox exists. A worker too old to serve it is asked by
// polling its status.
func (s *Sandbox) waitReady(ctx context.Context) (SandboxStatus, error) {
	c := s.c
	var st workflows.SandboxStatus
	err := c.update(ctx, s.id, NewID("ready-"), workflows.UpdateReady, &st)
	if err == nil {
		return statusOf(s.id, st), nil
	}
	if ctx.Err() != nil {
		return SandboxStatus{}, ctx.Err()
	}
	var u *UnavailableError
	if errors.As(err, &u) {
		return SandboxStatus{}, err
	}
	// Its failure is the workflow's: the workflow's result says it whole,
	// and says it too when the workflow ended before the Update came.
	if werr, ended := s.ended(ctx); ended {
		return SandboxStatus{}, fmt.Errorf("create sandbox %s: %w", s.id, werr)
	}
	if !unknownUpdate(err) {
		return SandboxStatus{}, fmt.Errorf("create sandbox %s: %w", s.id, err)
	}
	return s.pollReady(ctx)
}

// unknownUpdate says whether err is a worker's refusal of an Update it
// has no handler for.
func unknownUpdate(err error) bool {
	return strings.Contains(err.Error(), "unknown update")
}

// ended says whether the sandbox's workflow has ended, and with what
// failure.
func (s *Sandbox) ended(ctx context.Context) (error, bool) {
	c := s.c
	var desc *workflowservice.DescribeWorkflowExecutionResponse
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		desc, err = c.temporal.DescribeWorkflowExecution(ctx, s.id, "")
		return err
	})
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, false
	}
	werr := c.retry(ctx, func(ctx context.Context) error {
		return c.temporal.GetWorkflow(ctx, s.id, "").Get(ctx, nil)
	})
	if werr == nil {
		werr = errdefs.Errorf(errdefs.NotFound, "sandbox %s has ended", s.id)
	}
	return temporalerr.Classify(cause(werr)), true
}

// cause strips the layers of workflow and activity failure off an
// error, down to what went wrong.
func cause(err error) error {
	for {
		var app *temporal.ApplicationError
		if errors.As(err, &app) {
			return app
		}
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// pollReady waits for a worker that serves no berth.ready: it asks the
// sandbox's status, less and less often, until the sandbox exists or
// its workflow ended.
func (s *Sandbox) pollReady(ctx context.Context) (SandboxStatus, error) {
	wait := 50 * time.Millisecond
	for {
		var st workflows.SandboxStatus
		err := s.c.query(ctx, s.id, "", workflows.QuerySandbox, &st)
		if err == nil && st.ID != "" {
			return statusOf(s.id, st), nil
		}
		if werr, ended := s.ended(ctx); ended {
			return SandboxStatus{}, fmt.Errorf("create sandbox %s: %w", s.id, werr)
		}
		select {
		case <-ctx.Done():
			return SandboxStatus{}, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
