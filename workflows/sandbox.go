package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/sandbox/ops"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/transfer/relay"
)

// SandboxInput configures a standalone sandbox.
type SandboxInput struct {
	Provider string `json:"provider"`
	// Image is the image of the sandbox's root filesystem, for providers
	// that have images; empty means the provider's default.
	Image     string             `json:"image,omitempty"`
	Env       map[string]string  `json:"env,omitempty"`
	Resources provider.Resources `json:"resources,omitzero"`
	Labels    map[string]string  `json:"labels,omitempty"`
	// Network is what the sandbox may reach beyond its loopback; the
	// zero policy is loopback only. UpdateNetwork changes it.
	Network provider.Network `json:"network,omitzero"`
	// MaxLifetime ends the sandbox, and its workflow, after this long;
	// zero means provider.DefaultLifetime.
	MaxLifetime time.Duration `json:"max_lifetime,omitempty"`
	// IdleTimeout and HibernateAfter: zero means the sandbox package's
	// defaults, a negative value never.
	IdleTimeout    time.Duration `json:"idle_timeout,omitempty"`
	HibernateAfter time.Duration `json:"hibernate_after,omitempty"`
	// FromSnapshot fills the workspace from a snapshot; OwnSnapshot says
	// the snapshot was made for this sandbox alone (a fork) and is
	// garbage-collected with it.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	OwnSnapshot  bool   `json:"own_snapshot,omitempty"`
	// Hibernated starts the sandbox hibernated (sandbox.StartHibernated):
	// nothing is made at the provider until its first operation, which
	// fills its workspace from FromSnapshot.
	Hibernated bool `json:"hibernated,omitempty"`
	// ContinueAfter continues the workflow as new once its history has
	// this many events, to keep it short; zero means when the server
	// suggests it.
	ContinueAfter int `json:"continue_after,omitempty"`
	// Checkpoint says when the workspace is checkpointed besides before
	// hibernating: what a sandbox whose host is lost comes back from.
	Checkpoint sandbox.CheckpointPolicy `json:"checkpoint,omitzero"`
	// HostTimeout is how long an operation waits for the sandbox's host
	// before the sandbox is taken for lost (sandbox.WithHostTimeout);
	// zero means sandbox.DefaultHostTimeout.
	HostTimeout time.Duration `json:"host_timeout,omitempty"`

	// Carried is set by the workflow itself when it continues as new.
	Carried *Carried `json:"carried,omitempty"`
}

// Carried is what a Sandbox workflow hands to its next run.
type Carried struct {
	Sandbox sandbox.HandleState `json:"sandbox"`
	Created time.Time           `json:"created"`
	// Ended are the last commands that ended, for berth.attach.
	Ended []ops.EndedCommand `json:"ended,omitempty"`
}

// The operations of a standalone sandbox are Workflow Updates with these
// names, and its state the answer to QuerySandbox: a CLI, another
// workflow or a Temporal SDK in any language can drive it. Arguments and
// results are JSON; see docs/protocol.md, "berth.Sandbox". The commands
// and files are package ops' Updates, which a coding agent's session
// serves too.
const (
	UpdateExec       = ops.UpdateExec       // ExecRequest -> RunOutput
	UpdateWriteFiles = ops.UpdateWriteFiles // WriteFilesRequest -> nothing
	UpdateImport     = ops.UpdateImport     // ImportRequest -> nothing
	UpdateReadFile   = ops.UpdateReadFile   // PathRequest -> transfer.Output
	UpdateListFiles  = ops.UpdateListFiles  // PathRequest -> []provider.FileInfo
	UpdateExport     = ops.UpdateExport     // PathRequest -> transfer.Output (a tar in the blob store)
	UpdateRemove     = ops.UpdateRemove     // PathRequest -> nothing
	UpdateSignal     = ops.UpdateSignal     // SignalRequest -> nothing
	UpdateAttach     = ops.UpdateAttach     // AttachRequest -> RunOutput
	UpdateSnapshot   = "berth.snapshot"     // nothing -> SnapshotResponse
	UpdateFork       = "berth.fork"         // ForkRequest -> ForkResponse
	UpdateSwitch     = "berth.switch"       // SwitchRequest -> nothing
	UpdatePause      = "berth.pause"        // nothing -> nothing
	UpdateResume     = "berth.resume"       // nothing -> nothing
	UpdateHibernate  = "berth.hibernate"    // nothing -> nothing
	UpdateStop       = "berth.stop"         // nothing -> nothing
	UpdateReady      = "berth.ready"        // nothing -> SandboxStatus, once the sandbox exists
	UpdateNetwork    = "berth.network"      // provider.Network -> nothing
	QuerySandbox     = ops.QuerySandbox     // -> SandboxStatus
)

// Memo keys a standalone sandbox keeps current, for listings.
const (
	MemoProvider = "berth.provider"
	MemoState    = "berth.state"
	// MemoQueue is the task queue of the sandbox's host: berth sandbox
	// ls asks whether a worker polls it.
	MemoQueue = "berth.queue"
)

// memoQueueVersion marks the sandboxes that keep MemoQueue.
const memoQueueVersion = "berth.sandbox.memo-queue"

// The requests and results of the commands and files Updates (package
// ops).
type (
	ExecRequest       = ops.ExecRequest
	WriteFilesRequest = ops.WriteFilesRequest
	ImportRequest     = ops.ImportRequest
	PathRequest       = ops.PathRequest
	CommandStatus     = ops.CommandStatus
	SignalRequest     = ops.SignalRequest
	AttachRequest     = ops.AttachRequest
	EndedCommand      = ops.EndedCommand
)

// SnapshotResponse names the snapshot taken.
type SnapshotResponse struct {
	Snapshot string `json:"snapshot"`
}

// ForkRequest asks for a new standalone sandbox, with workflow id ID,
// whose workspace is a copy of this one's. It has this one's settings
// but for those the request sets, which mean what SandboxInput's do:
// Provider empty means the same provider; each non-zero field of
// Resources replaces the parent's; Env and Labels are added to the
// parent's; a non-zero duration replaces the parent's.
type ForkRequest struct {
	ID             string             `json:"id"`
	Provider       string             `json:"provider,omitempty"`
	Image          string             `json:"image,omitempty"`
	Env            map[string]string  `json:"env,omitempty"`
	Resources      provider.Resources `json:"resources,omitzero"`
	Labels         map[string]string  `json:"labels,omitempty"`
	MaxLifetime    time.Duration      `json:"max_lifetime,omitempty"`
	IdleTimeout    time.Duration      `json:"idle_timeout,omitempty"`
	HibernateAfter time.Duration      `json:"hibernate_after,omitempty"`
	// Network, when set, replaces the parent's network policy.
	Network *provider.Network `json:"network,omitempty"`
}

// forkInput is the input of the Sandbox workflow a fork starts: the
// parent's settings, changed as req says, its workspace from snap. The
// owner labels are not carried: the fork's sandbox is labelled with its
// own workflow.
func forkInput(parent SandboxInput, req ForkRequest, snap string) SandboxInput {
	in := parent.settings()
	if req.Provider != "" {
		in.Provider = req.Provider
	}
	if req.Image != "" {
		in.Image = req.Image
	}
	in.Env = merge(in.Env, req.Env)
	in.Labels = merge(in.Labels, req.Labels)
	if req.Network != nil {
		in.Network = *req.Network
	}
	delete(in.Labels, sandbox.LabelWorkflowID)
	delete(in.Labels, sandbox.LabelRunID)
	r := req.Resources
	if r.CPU != 0 {
		in.Resources.CPU = r.CPU
	}
	if r.Memory != 0 {
		in.Resources.Memory = r.Memory
	}
	if r.Pids != 0 {
		in.Resources.Pids = r.Pids
	}
	if r.Disk != 0 {
		in.Resources.Disk = r.Disk
	}
	for _, d := range []struct {
		to   *time.Duration
		from time.Duration
	}{
		{&in.MaxLifetime, req.MaxLifetime}, {&in.IdleTimeout, req.IdleTimeout}, {&in.HibernateAfter, req.HibernateAfter},
	} {
		if d.from != 0 {
			*d.to = d.from
		}
	}
	in.FromSnapshot, in.OwnSnapshot, in.Hibernated = snap, true, false
	return in
}

// merge returns a copy of base with over's entries added.
func merge(base, over map[string]string) map[string]string {
	if len(base)+len(over) == 0 {
		return nil
	}
	m := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

// ForkResponse names the new sandbox's workflow.
type ForkResponse struct {
	ID string `json:"id"`
}

// SandboxStatus is the state of a standalone sandbox.
type SandboxStatus struct {
	sandbox.Status
	Created time.Time `json:"created"`
	// Config is what the sandbox was created with (SandboxInput.settings).
	Config SandboxInput `json:"config"`
	// Running lists the commands under way, for front ends that follow
	// their output live.
	Running []CommandStatus `json:"running,omitempty"`
}

// settings are the input without what the workflow carries between its
// own runs: what a caller asked for.
func (in SandboxInput) settings() SandboxInput {
	in.Carried, in.ContinueAfter = nil, 0
	return in
}

// Validate checks the settings before anything is created.
func (in SandboxInput) Validate() error {
	if in.Provider == "" {
		return fmt.Errorf("%w: no provider", errdefs.ErrBadInput)
	}
	if in.MaxLifetime < 0 {
		return fmt.Errorf("%w: negative lifetime %v", errdefs.ErrBadInput, in.MaxLifetime)
	}
	if in.FromSnapshot != "" {
		if err := provider.ValidateID(in.FromSnapshot); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	if err := in.Checkpoint.Validate(); err != nil {
		return err
	}
	if err := sandbox.ValidateHostTimeout(in.HostTimeout); err != nil {
		return err
	}
	return provider.ValidateSpec(provider.Spec{Env: in.Env, Labels: in.Labels, Resources: in.Resources, Network: in.Network})
}

// starter is how a sandbox starts: made now (sandbox.New), or
// hibernated until its first operation.
func starter(hibernated bool) func(workflow.Context, sandbox.Provider, ...sandbox.Option) (*sandbox.Sandbox, error) {
	if hibernated {
		return sandbox.StartHibernated
	}
	return sandbox.New
}

// Sandbox keeps a sandbox alive until it is stopped (UpdateStop, or the
// workflow canceled) or its lifetime ends, serving its operations as
// updates. It fails with an application error whose type is the
// errdefs.Kind of the failure (sandbox.Failure).
func Sandbox(ctx workflow.Context, in SandboxInput) (err error) {
	defer func() { err = sandbox.Failure(err) }()
	if err := in.Validate(); err != nil {
		return err
	}
	opts := []sandbox.Option{
		sandbox.WithEnv(in.Env), sandbox.WithResources(in.Resources), sandbox.WithLabels(in.Labels),
		sandbox.WithMaxLifetime(in.MaxLifetime), sandbox.WithNetwork(in.Network),
		sandbox.WithIdleTimeout(in.IdleTimeout), sandbox.WithHibernateAfter(in.HibernateAfter),
		sandbox.WithCheckpoint(in.Checkpoint), sandbox.WithHostTimeout(in.HostTimeout),
	}
	switch {
	case in.FromSnapshot != "" && in.OwnSnapshot:
		opts = append(opts, sandbox.FromCheckpoint(in.FromSnapshot))
	case in.FromSnapshot != "":
		opts = append(opts, sandbox.FromSnapshot(in.FromSnapshot))
	}
	created := workflow.Now(ctx)
	var ended []ops.EndedCommand
	if in.Carried != nil {
		created, ended = in.Carried.Created, in.Carried.Ended
	}
	// Handlers first: an update that comes while the sandbox is being
	// created waits for it, instead of being refused as unknown.
	s := &standalone{config: in.settings(), created: created, ended: ended}
	if err := s.register(ctx); err != nil {
		return err
	}
	var sbx *sandbox.Sandbox
	if in.Carried != nil {
		sbx = sandbox.Reattach(ctx, in.Carried.Sandbox)
	} else if sbx, err = starter(in.Hibernated)(ctx, sandbox.Provider{Name: in.Provider, Image: in.Image}, opts...); err != nil {
		// The berth.ready Updates waiting answer with the failure before
		// the workflow ends with it. With none waiting this yields
		// nothing: a history without one replays as it did.
		s.createErr = err
		_ = workflow.Await(ctx, func() bool { return s.readyWaiting == 0 })
		return err
	}
	s.sbx = sbx
	defer func() {
		// Does nothing once the sandbox is carried to the next run. A
		// sandbox that could not be destroyed fails the workflow.
		if serr := sbx.Stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()

	lifetime := in.MaxLifetime
	if lifetime <= 0 {
		lifetime = provider.DefaultLifetime
	}
	expired := false
	workflow.Go(ctx, func(ctx workflow.Context) {
		if workflow.Sleep(ctx, created.Add(lifetime).Sub(workflow.Now(ctx))) == nil {
			expired = true
		}
	})
	tooLong := func() bool {
		if in.ContinueAfter > 0 {
			return workflow.GetInfo(ctx).GetCurrentHistoryLength() >= in.ContinueAfter
		}
		return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	}
	memo, memoProvider, memoQueue := sandbox.State(""), "", ""
	withQueue := workflow.GetVersion(ctx, memoQueueVersion, workflow.DefaultVersion, 1) == 1
	queue := func() string {
		if withQueue {
			return sbx.Ref().Queue
		}
		return ""
	}
	for {
		if st, prov, q := sbx.State(), s.config.Provider, queue(); st != memo || prov != memoProvider || q != memoQueue {
			m := map[string]any{MemoState: st, MemoProvider: prov}
			if withQueue {
				m[MemoQueue] = q
			}
			if err := workflow.UpsertMemo(ctx, m); err != nil {
				return err
			}
			memo, memoProvider, memoQueue = st, prov, q
		}
		// Continuing as new happens in one workflow task, the handle idle
		// and no update in flight: nothing is left behind in this run.
		canCarry := func() bool { return tooLong() && workflow.AllHandlersFinished(ctx) && !sbx.Busy() }
		err := workflow.Await(ctx, func() bool {
			return s.stopping || expired || canCarry() || sbx.State() != memo || s.config.Provider != memoProvider || queue() != memoQueue
		})
		if err != nil {
			return err // canceled: the deferred Stop cleans up
		}
		if s.stopping || expired {
			break
		}
		if canCarry() {
			// The settings as they are now: a switch changed the provider.
			next := s.config
			next.ContinueAfter = in.ContinueAfter
			next.Carried = &Carried{Sandbox: sbx.Carry(), Created: created, Ended: s.ops.Ended()}
			return workflow.NewContinueAsNewError(ctx, SandboxWorkflowName, next)
		}
	}
	// Let the updates in flight (the stop among them) finish first.
	return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}

// standalone is the state of a Sandbox workflow.
type standalone struct {
	sbx      *sandbox.Sandbox
	config   SandboxInput
	created  time.Time
	ops      *ops.Ops
	ended    []ops.EndedCommand // carried from the run before, for ops
	stopping bool
	// createErr is why the sandbox could not be created, for the
	// berth.ready Updates in flight (readyWaiting of them).
	createErr    error
	readyWaiting int
}

func (s *standalone) register(ctx workflow.Context) error {
	// The relay serves the sandbox's outputs, files and exports, and
	// takes uploads for it, to import.
	err := relay.Serve(ctx, func() transfer.Served { return transfer.Served{Prefixes: s.sbx.Served(), Uploads: true} })
	if err != nil {
		return err
	}
	s.ops, err = ops.Register(ctx, ops.Owner{
		Sandbox: func() *sandbox.Sandbox { return s.sbx },
		Open:    func() error { return s.validateOpen(ctx) },
		Ended:   s.ended,
	})
	if err != nil {
		return err
	}
	err = workflow.SetQueryHandler(ctx, QuerySandbox, func() (SandboxStatus, error) {
		st := SandboxStatus{Created: s.created, Config: s.config}
		if s.sbx == nil {
			return st, nil // being created
		}
		st.Status = s.sbx.Status()
		st.Running = s.ops.Running()
		return st, nil
	})
	if err != nil {
		return err
	}
	handlers := []struct {
		name      string
		handler   any
		validator any
	}{
		{UpdateSnapshot, s.snapshot, s.validateOpen},
		{UpdateFork, s.fork, s.validateFork},
		{UpdateSwitch, s.switchTo, s.validateSwitch},
		{UpdatePause, s.pause, s.validateOpen},
		{UpdateResume, s.resume, s.validateOpen},
		{UpdateHibernate, s.hibernate, s.validateOpen},
		{UpdateNetwork, s.setNetwork, s.validateNetwork},
		{UpdateStop, s.stop, nil},
		{UpdateReady, s.readyStatus, nil},
	}
	for _, h := range handlers {
		err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.handler,
			workflow.UpdateHandlerOptions{Validator: h.validator})
		if err != nil {
			return err
		}
	}
	return nil
}

// Validators reject what would fail anyway before it enters history.

func (s *standalone) validateOpen(workflow.Context) error {
	if s.stopping || s.sbx != nil && s.sbx.State() == sandbox.StateStopped {
		return updateError(fmt.Errorf("%w: the sandbox is stopping", errdefs.ErrNotFound))
	}
	return nil
}

func (s *standalone) validateFork(ctx workflow.Context, req ForkRequest) error {
	if err := s.validateOpen(ctx); err != nil {
		return err
	}
	if err := provider.ValidateID(req.ID); err != nil {
		return updateError(err)
	}
	// What the fork would be created with, checked now rather than by
	// the fork's workflow, whose failure nobody waits for.
	return updateError(forkInput(s.config, req, "snapshot").Validate())
}

// Handlers.

func (s *standalone) snapshot(ctx workflow.Context) (SnapshotResponse, error) {
	if err := s.ready(ctx); err != nil {
		return SnapshotResponse{}, err
	}
	id, err := s.sbx.Snapshot(ctx)
	return SnapshotResponse{Snapshot: id}, updateError(err)
}

func (s *standalone) fork(ctx workflow.Context, req ForkRequest) (ForkResponse, error) {
	if err := s.ready(ctx); err != nil {
		return ForkResponse{}, err
	}
	snap, err := s.sbx.ForkSnapshot(ctx, req.ID)
	if err != nil {
		return ForkResponse{}, updateError(err)
	}
	in := forkInput(s.config, req, snap)
	if req.Provider == "" {
		in.Provider = s.sbx.Ref().Provider
	}
	// The fork lives on its own: abandoned, not ended, when this
	// workflow ends.
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        req.ID,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
	})
	child := workflow.ExecuteChildWorkflow(cctx, SandboxWorkflowName, in)
	var started workflow.Execution
	if err := child.GetChildWorkflowExecution().Get(ctx, &started); err != nil {
		return ForkResponse{}, updateError(fmt.Errorf("start the fork: %w", err))
	}
	return ForkResponse{ID: started.ID}, nil
}

func (s *standalone) validateNetwork(ctx workflow.Context, n provider.Network) error {
	if err := n.Validate(); err != nil {
		return updateError(err)
	}
	return s.validateOpen(ctx)
}

func (s *standalone) setNetwork(ctx workflow.Context, n provider.Network) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := s.sbx.SetNetwork(ctx, n); err != nil {
		return updateError(err)
	}
	// Forks, and the workflow's next run, start from the settings.
	s.config.Network = n
	return nil
}

// SwitchRequest moves a sandbox to another provider (or image): its
// workspace goes along, its processes do not.
type SwitchRequest struct {
	Provider string `json:"provider"`
	// Image empty is the provider's default image.
	Image string `json:"image,omitempty"`
}

func (s *standalone) validateSwitch(ctx workflow.Context, req SwitchRequest) error {
	if req.Provider == "" {
		return updateError(fmt.Errorf("%w: switch to which provider?", errdefs.ErrBadInput))
	}
	if req.Image != "" {
		if err := provider.ValidateSpec(provider.Spec{Image: req.Image}); err != nil {
			return updateError(err)
		}
	}
	return s.validateOpen(ctx)
}

func (s *standalone) switchTo(ctx workflow.Context, req SwitchRequest) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	if err := s.sbx.Switch(ctx, sandbox.Provider{Name: req.Provider, Image: req.Image}); err != nil {
		return updateError(err)
	}
	s.config.Provider, s.config.Image = req.Provider, s.sbx.Status().Image
	return nil
}

func (s *standalone) pause(ctx workflow.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return updateError(s.sbx.Pause(ctx))
}

func (s *standalone) resume(ctx workflow.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return updateError(s.sbx.Resume(ctx))
}

func (s *standalone) hibernate(ctx workflow.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return updateError(s.sbx.Hibernate(ctx))
}

// ready waits until the sandbox exists: updates may come while it is
// being created.
func (s *standalone) ready(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return s.sbx != nil })
}

// readyStatus answers berth.ready: the sandbox's status once it exists,
// or why it could not be created. A front end waits on it after the
// start rather than polling QuerySandbox.
func (s *standalone) readyStatus(ctx workflow.Context) (SandboxStatus, error) {
	s.readyWaiting++
	defer func() { s.readyWaiting-- }()
	if err := workflow.Await(ctx, func() bool { return s.sbx != nil || s.createErr != nil }); err != nil {
		return SandboxStatus{}, err
	}
	if s.sbx == nil {
		return SandboxStatus{}, updateError(s.createErr)
	}
	return SandboxStatus{Status: s.sbx.Status(), Created: s.created, Config: s.config, Running: s.ops.Running()}, nil
}

func (s *standalone) stop(ctx workflow.Context) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	s.stopping = true
	return updateError(s.sbx.Stop(ctx))
}

// updateError gives an update's failure a type that says what went
// wrong, the provider kind, for callers in any language.
func updateError(err error) error { return sandbox.Failure(err) }
