package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
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
	// ContinueAfter continues the workflow as new once its history has
	// this many events, to keep it short; zero means when the server
	// suggests it.
	ContinueAfter int `json:"continue_after,omitempty"`

	// Carried is set by the workflow itself when it continues as new.
	Carried *Carried `json:"carried,omitempty"`
}

// Carried is what a Sandbox workflow hands to its next run.
type Carried struct {
	Sandbox sandbox.Carried `json:"sandbox"`
	Created time.Time       `json:"created"`
}

// The operations of a standalone sandbox are Workflow Updates with these
// names, and its state the answer to QuerySandbox: a CLI, another
// workflow or a Temporal SDK in any language can drive it. Arguments and
// results are JSON; see docs/workflows.md.
const (
	UpdateExec       = "berth.exec"        // ExecRequest -> RunOutput
	UpdateWriteFiles = "berth.write_files" // WriteFilesRequest -> nothing
	UpdateImport     = "berth.import"      // ImportRequest -> nothing
	UpdateReadFile   = "berth.read_file"   // PathRequest -> transfer.Output
	UpdateListFiles  = "berth.list_files"  // PathRequest -> []provider.FileInfo
	UpdateExport     = "berth.export"      // PathRequest -> transfer.Output (a tar in the blob store)
	UpdateRemove     = "berth.remove"      // PathRequest -> nothing
	UpdateSnapshot   = "berth.snapshot"    // nothing -> SnapshotResponse
	UpdateFork       = "berth.fork"        // ForkRequest -> ForkResponse
	UpdateSwitch     = "berth.switch"      // SwitchRequest -> nothing
	UpdatePause      = "berth.pause"       // nothing -> nothing
	UpdateResume     = "berth.resume"      // nothing -> nothing
	UpdateHibernate  = "berth.hibernate"   // nothing -> nothing
	UpdateStop       = "berth.stop"        // nothing -> nothing
	QuerySandbox     = "berth.sandbox"     // -> SandboxStatus
)

// Memo keys a standalone sandbox keeps current, for listings.
const (
	MemoProvider = "berth.provider"
	MemoState    = "berth.state"
)

// ExecRequest is a command. Exactly one of Argv and Shell is set.
type ExecRequest struct {
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"` // nanoseconds
	Stdin   []byte            `json:"stdin,omitempty"`   // base64
	// MaxOutput caps what is stored of each output stream; zero means
	// transfer.DefaultMaxOutput.
	MaxOutput int64 `json:"max_output,omitempty"`
	// TTY runs the command on a terminal of this size; see terminal.go.
	TTY *provider.TerminalSize `json:"tty,omitempty"`
}

// WriteFilesRequest carries files inline, at most
// transfer.MaxInlineFiles bytes in all.
type WriteFilesRequest struct {
	Files []provider.File `json:"files"`
}

// ImportRequest names a tar stream a front end stored in the output blob
// store, under the sandbox's transfer.UploadPrefix (through the relay:
// see package client), to unpack into the workspace. Parts is the
// number of parts it is stored in; zero means one object.
type ImportRequest struct {
	Blob  string `json:"blob"`
	Parts int    `json:"parts,omitempty"`
}

// PathRequest names a workspace path.
type PathRequest struct {
	Path string `json:"path"`
}

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
	in.FromSnapshot, in.OwnSnapshot = snap, true
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

// CommandStatus says where a running command's output is stored.
type CommandStatus struct {
	Update  string `json:"update"` // the id of the update that runs it
	Command string `json:"command"`
	Stdout  string `json:"stdout"` // blob keys
	Stderr  string `json:"stderr"`
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
		return fmt.Errorf("%w: no provider", provider.ErrBadInput)
	}
	if in.MaxLifetime < 0 {
		return fmt.Errorf("%w: negative lifetime %v", provider.ErrBadInput, in.MaxLifetime)
	}
	if in.FromSnapshot != "" {
		if err := provider.ValidateID(in.FromSnapshot); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return provider.ValidateSpec(provider.Spec{Env: in.Env, Labels: in.Labels, Resources: in.Resources})
}

// Sandbox keeps a sandbox alive until it is stopped (UpdateStop, or the
// workflow canceled) or its lifetime ends, serving its operations as
// updates. It fails with an application error whose type is the
// provider.Kind of the failure (sandbox.Failure).
func Sandbox(ctx workflow.Context, in SandboxInput) (err error) {
	defer func() { err = sandbox.Failure(err) }()
	if err := in.Validate(); err != nil {
		return err
	}
	opts := []sandbox.Option{
		sandbox.WithEnv(in.Env), sandbox.WithResources(in.Resources), sandbox.WithLabels(in.Labels),
		sandbox.WithMaxLifetime(in.MaxLifetime),
		sandbox.WithIdleTimeout(in.IdleTimeout), sandbox.WithHibernateAfter(in.HibernateAfter),
	}
	switch {
	case in.FromSnapshot != "" && in.OwnSnapshot:
		opts = append(opts, sandbox.FromCheckpoint(in.FromSnapshot))
	case in.FromSnapshot != "":
		opts = append(opts, sandbox.FromSnapshot(in.FromSnapshot))
	}
	created := workflow.Now(ctx)
	if in.Carried != nil {
		created = in.Carried.Created
	}
	// Handlers first: an update that comes while the sandbox is being
	// created waits for it, instead of being refused as unknown.
	s := &standalone{config: in.settings(), created: created, running: map[string]CommandStatus{}}
	if err := s.register(ctx); err != nil {
		return err
	}
	var sbx *sandbox.Sandbox
	if in.Carried != nil {
		sbx = sandbox.Reattach(ctx, in.Carried.Sandbox)
	} else if sbx, err = sandbox.New(ctx, sandbox.Provider{Type: in.Provider, Image: in.Image}, opts...); err != nil {
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
	memo, memoProvider := sandbox.State(""), ""
	for {
		if st, prov := sbx.State(), s.config.Provider; st != memo || prov != memoProvider {
			if err := workflow.UpsertMemo(ctx, map[string]any{MemoState: st, MemoProvider: prov}); err != nil {
				return err
			}
			memo, memoProvider = st, prov
		}
		// Continuing as new happens in one workflow task, the handle idle
		// and no update in flight: nothing is left behind in this run.
		canCarry := func() bool { return tooLong() && workflow.AllHandlersFinished(ctx) && !sbx.Busy() }
		err := workflow.Await(ctx, func() bool {
			return s.stopping || expired || canCarry() || sbx.State() != memo || s.config.Provider != memoProvider
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
			next.Carried = &Carried{Sandbox: sbx.Carry(), Created: created}
			return workflow.NewContinueAsNewError(ctx, Sandbox, next)
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
	running  map[string]CommandStatus // by update id
	stopping bool
}

func (s *standalone) register(ctx workflow.Context) error {
	// The relay serves the sandbox's outputs, files and exports, and
	// takes uploads for it, to import.
	err := transfer.Serve(ctx, func() transfer.Served { return transfer.Served{Prefixes: s.sbx.Served(), Uploads: true} })
	if err != nil {
		return err
	}
	err = workflow.SetQueryHandler(ctx, QuerySandbox, func() (SandboxStatus, error) {
		st := SandboxStatus{Created: s.created, Config: s.config}
		if s.sbx == nil {
			return st, nil // being created
		}
		st.Status = s.sbx.Status()
		for _, c := range s.running {
			st.Running = append(st.Running, c)
		}
		slices.SortFunc(st.Running, func(a, b CommandStatus) int { return strings.Compare(a.Command, b.Command) })
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
		{UpdateExec, s.exec, s.validateExec},
		{UpdateWriteFiles, s.writeFiles, s.validateWriteFiles},
		{UpdateImport, s.importBlob, s.validateImport},
		{UpdateReadFile, s.readFile, s.validatePath},
		{UpdateListFiles, s.listFiles, s.validatePath},
		{UpdateExport, s.export, s.validatePath},
		{UpdateRemove, s.remove, s.validatePath},
		{UpdateSnapshot, s.snapshot, s.validateOpen},
		{UpdateFork, s.fork, s.validateFork},
		{UpdateSwitch, s.switchTo, s.validateSwitch},
		{UpdatePause, s.pause, s.validateOpen},
		{UpdateResume, s.resume, s.validateOpen},
		{UpdateHibernate, s.hibernate, s.validateOpen},
		{UpdateStop, s.stop, nil},
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
		return updateError(fmt.Errorf("%w: the sandbox is stopping", provider.ErrNotFound))
	}
	return nil
}

func (s *standalone) validateExec(ctx workflow.Context, req ExecRequest) error {
	if err := s.validateOpen(ctx); err != nil {
		return err
	}
	if err := validateTerminal(req); err != nil {
		return updateError(err)
	}
	return updateError(provider.ValidateExec(provider.ExecRequest{Argv: req.Argv, Shell: req.Shell,
		Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, TTY: req.TTY}))
}

func (s *standalone) validateWriteFiles(ctx workflow.Context, req WriteFilesRequest) error {
	if err := s.validateOpen(ctx); err != nil {
		return err
	}
	return updateError(validateFiles(req.Files))
}

func (s *standalone) validateImport(ctx workflow.Context, req ImportRequest) error {
	if err := s.validateOpen(ctx); err != nil {
		return err
	}
	if err := transfer.CheckUpload(req.Blob); err != nil {
		return updateError(fmt.Errorf("%w: %v", provider.ErrBadInput, err))
	}
	// Only what was uploaded for this sandbox: not another's.
	own, err := transfer.UploadPrefix(workflow.GetInfo(ctx).WorkflowExecution.ID)
	if err != nil || !strings.HasPrefix(req.Blob, own) {
		return updateError(fmt.Errorf("%w: %s is not an upload of this sandbox's", provider.ErrBadInput, req.Blob))
	}
	return nil
}

func (s *standalone) validatePath(ctx workflow.Context, req PathRequest) error {
	if err := s.validateOpen(ctx); err != nil {
		return err
	}
	if _, err := provider.WorkspacePath(req.Path); err != nil {
		return updateError(err)
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

func (s *standalone) exec(ctx workflow.Context, req ExecRequest) (RunOutput, error) {
	if err := s.ready(ctx); err != nil {
		return RunOutput{}, err
	}
	update := workflow.GetCurrentUpdateInfo(ctx).ID
	opts := []sandbox.ExecOption{
		sandbox.WithExecEnv(req.Env), sandbox.WithDir(req.Dir), sandbox.WithStdin(req.Stdin),
		// Named by the update: its handlers may run in another order
		// when a workflow task is retried after a crash, and an update
		// sent again must find the command it started.
		sandbox.WithKey(update),
		sandbox.OnStart(func(id string) {
			sb := s.sbx.ID()
			s.running[update] = CommandStatus{Update: update, Command: id,
				Stdout: transfer.OutputKey(sb, id, "stdout"), Stderr: transfer.OutputKey(sb, id, "stderr")}
		}),
	}
	if req.Timeout > 0 {
		opts = append(opts, sandbox.WithTimeout(req.Timeout))
	}
	opts = append(opts, sandbox.WithMaxOutput(req.MaxOutput))
	if req.TTY != nil {
		opts = append(opts, terminalOption(ctx, *req.TTY, update))
	}
	defer delete(s.running, update)
	var res sandbox.Result
	var err error
	if req.Shell != "" {
		res, err = s.sbx.Exec(ctx, req.Shell, opts...)
	} else {
		res, err = s.sbx.ExecArgv(ctx, req.Argv, opts...)
	}
	out, err := execOutput(res, s.sbx.ID(), err)
	return out, updateError(err)
}

func (s *standalone) writeFiles(ctx workflow.Context, req WriteFilesRequest) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return updateError(s.sbx.WriteFiles(ctx, req.Files...))
}

func (s *standalone) importBlob(ctx workflow.Context, req ImportRequest) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return updateError(s.sbx.Import(ctx, req.Blob, req.Parts))
}

func (s *standalone) readFile(ctx workflow.Context, req PathRequest) (transfer.Output, error) {
	if err := s.ready(ctx); err != nil {
		return transfer.Output{}, err
	}
	out, err := s.sbx.ReadFileOutput(ctx, req.Path)
	return out, updateError(err)
}

func (s *standalone) export(ctx workflow.Context, req PathRequest) (transfer.Output, error) {
	if err := s.ready(ctx); err != nil {
		return transfer.Output{}, err
	}
	out, err := s.sbx.Export(ctx, req.Path)
	return out, updateError(err)
}

func (s *standalone) listFiles(ctx workflow.Context, req PathRequest) ([]provider.FileInfo, error) {
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	infos, err := s.sbx.ListFiles(ctx, req.Path)
	return infos, updateError(err)
}

func (s *standalone) remove(ctx workflow.Context, req PathRequest) error {
	if err := s.ready(ctx); err != nil {
		return err
	}
	return updateError(s.sbx.Remove(ctx, req.Path))
}

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
	child := workflow.ExecuteChildWorkflow(cctx, Sandbox, in)
	var started workflow.Execution
	if err := child.GetChildWorkflowExecution().Get(ctx, &started); err != nil {
		return ForkResponse{}, updateError(fmt.Errorf("start the fork: %w", err))
	}
	return ForkResponse{ID: started.ID}, nil
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
		return updateError(fmt.Errorf("%w: switch to which provider?", provider.ErrBadInput))
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
	if err := s.sbx.Switch(ctx, sandbox.Provider{Type: req.Provider, Image: req.Image}); err != nil {
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

// ReaperInput names the queue of the host whose sandboxes a reaper
// looks after.
type ReaperInput struct {
	Queue string `json:"queue"`
	// OutputRetention is how long sandboxes' outputs outlive their
	// owner; zero means transfer.DefaultOutputRetention.
	OutputRetention time.Duration `json:"output_retention,omitempty"`
}

// Reaper destroys the sandboxes whose owner is gone or whose lifetime
// has passed (sandbox.Reap). berth dev and berth worker run it on a
// schedule, one per host.
func Reaper(ctx workflow.Context, in ReaperInput) (sandbox.ReapReport, error) {
	return sandbox.Reap(ctx, in.Queue, in.OutputRetention)
}
