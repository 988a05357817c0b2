package sandbox

import (
	"github.com/berth-dev/berth/internal/randid"
	"strconv"

	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/transfer"
)

// acts names the activities; its methods are only used as names.
var acts *activities.Activities

// Owner labels berth puts on every sandbox, naming the workflow that owns
// it, so that sandboxes whose owner is gone can be found and destroyed.
const (
	LabelWorkflowID = "berth.workflow-id"
	LabelRunID      = "berth.run-id"
	// LabelSandbox names, on a snapshot, the sandbox it was taken of,
	// and on a sandbox its first incarnation: the base of its ids.
	LabelSandbox = activities.LabelSandbox
)

// Sandbox is a handle on a sandbox, kept in workflow state. Its methods
// may be called from several workflow coroutines at once (the update
// handlers of a workflow, say): commands then run side by side, while
// pausing, resuming, checkpointing and recovering happen one at a time,
// with operations waiting for them.
type Sandbox struct {
	st       state
	detached bool          // carried to another run: hands off
	beat     time.Duration // the heartbeat timeout of this run's worker (WithHeartbeatTimeout)
}

// state is everything a handle knows, kept so that it can be carried
// across continue-as-new.
type state struct {
	Config config       `json:"config"`
	Ref    refs.Sandbox `json:"ref"`
	// Base is the id of the first sandbox; its successors (after a
	// hibernation, a recovery, a switch) are Base-2, Base-3...
	Base       string `json:"base"`
	Generation int    `json:"generation"`
	Commands   int    `json:"commands"`
	// OutputStored counts the command output stored so far, against
	// Config.OutputBudget.
	OutputStored int64     `json:"output_stored,omitempty"`
	Snapshots    int       `json:"snapshots"` // taken so far, for their ids
	State        State     `json:"state"`
	LastActive   time.Time `json:"last_active"`
	// Checkpoint is the snapshot a lost or hibernated sandbox comes back
	// from; OwnCheckpoint says the handle made it and deletes it when a
	// newer one replaces it.
	Checkpoint    string `json:"checkpoint,omitempty"`
	OwnCheckpoint bool   `json:"own_checkpoint,omitempty"`
	// RestoredFrom and RestoredAt say which snapshot the sandbox's
	// workspace was restored from, and when: its next snapshot reads
	// only what changed since.
	RestoredFrom string    `json:"restored_from,omitempty"`
	RestoredAt   time.Time `json:"restored_at,omitzero"`
	// Since lists the mutating operations since the checkpoint: what a
	// recovery loses. It keeps the first maxSince; SinceMore counts the
	// others, which a LostError counts without naming them.
	Since     []string `json:"since,omitempty"`
	SinceMore int      `json:"since_more,omitempty"`
	// GoneHost is the queue of the host that took no operation within
	// the host timeout, when that is how the sandbox was found lost:
	// nothing is sent there again.
	GoneHost string `json:"gone_host,omitempty"`
	// ChangedAt is when the first of Since happened (zero when Since is
	// empty), for CheckpointPolicy.Interval.
	ChangedAt time.Time `json:"changed_at,omitzero"`
	// Held is how long the sandbox has been held (running or paused),
	// up to HeldSince, the start of the current stretch, zero when it is
	// not held now. Active and ActiveSince count the same way the time
	// commands run.
	Held        time.Duration `json:"held,omitempty"`
	HeldSince   time.Time     `json:"held_since,omitzero"`
	Active      time.Duration `json:"active,omitempty"`
	ActiveSince time.Time     `json:"active_since,omitzero"`
	// RenewAt is when the sandbox RenewFor (an incarnation's id) is to
	// move to a new one before its service ends it; see expiry.go.
	RenewFor string    `json:"renew_for,omitempty"`
	RenewAt  time.Time `json:"renew_at,omitzero"`
	// Native is what the provider kept of a hibernated sandbox, when it
	// keeps filesystems itself (see hibernateNative); Hibernations
	// counts the native hibernations, for their ids.
	Native       *provider.Hibernation `json:"native,omitempty"`
	Hibernations int                   `json:"hibernations,omitempty"`

	busy     bool   // a transition is in flight
	notLocal string // a queue whose sandboxes this workflow's worker does not host
	inflight int    // operations in flight
	behind   int    // sandboxes left behind (by Switch) still being destroyed
	epoch    int    // bumped on every change the idle watcher cares about
	running  int    // commands running
}

// State is where a sandbox is in its lifecycle.
type State string

const (
	StateRunning    State = "running"
	StatePaused     State = "paused"     // frozen: no CPU, memory kept
	StateHibernated State = "hibernated" // checkpointed and destroyed
	StateLost       State = "lost"
	StateStopped    State = "stopped"
)

// LostError says that the sandbox was lost, what was lost with it, and
// whether it was recovered. errors.Is(err, errdefs.ErrSandboxLost) holds.
type LostError struct {
	Sandbox string // the id of the lost sandbox
	// Checkpoint is the snapshot the workspace was restored from; empty
	// when there was none and the workspace starts empty.
	Checkpoint string
	// Lost lists the mutating operations since that checkpoint, oldest
	// first: their effects are gone.
	Lost      []string
	Recovered bool
	// NotStarted says that the operation that found the loss never
	// reached the sandbox (no worker of its host ever took it): it did
	// not run at all. Otherwise it may have run in part.
	NotStarted bool
	Err        error // what revealed the loss
}

func (e *LostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandbox %s was lost", e.Sandbox)
	if !e.Recovered {
		b.WriteString(" and not recovered")
	} else if e.Checkpoint != "" {
		fmt.Fprintf(&b, "; recovered from checkpoint %s", e.Checkpoint)
	} else {
		b.WriteString("; recovered with an empty workspace")
	}
	if len(e.Lost) > 0 {
		fmt.Fprintf(&b, "; lost %d operation(s): %s", len(e.Lost), strings.Join(e.Lost, "; "))
	}
	if e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	return b.String()
}

func (e *LostError) Unwrap() error { return errdefs.ErrSandboxLost }

// New creates a sandbox and returns its handle. The caller stops it,
// usually with defer sbx.Stop(ctx). The handle's idle watcher runs on
// ctx: pass the workflow's own context, not one canceled early.
func New(ctx workflow.Context, p Provider, opts ...Option) (*Sandbox, error) {
	cfg := newConfig(p, opts)
	// Bad settings fail here, before anything is created or retried.
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	s, err := newHandle(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ref, err := s.provision(ctx, cfg.Provider, s.st.Base)
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	s.st.Ref, s.st.LastActive = ref, workflow.Now(ctx)
	s.set(ctx, StateRunning)
	s.start(ctx)
	return s, nil
}

// StartHibernated returns the handle of a sandbox that starts
// hibernated: nothing is made at the provider until its first
// operation, which wakes it as any hibernated sandbox wakes, with its
// workspace filled from the snapshot FromSnapshot or FromCheckpoint
// names (empty without either). Starting one costs a look at the
// snapshot store, so that a snapshot that is not there fails here, with
// an error wrapping errdefs.ErrNotFound, and not at the first wake.
// Many idle sandboxes made from one template hold nothing at their
// hosts until they are used.
func StartHibernated(ctx workflow.Context, p Provider, opts ...Option) (*Sandbox, error) {
	cfg := newConfig(p, opts)
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	if cfg.FromSnapshot != "" {
		if _, err := call[refs.Snapshot](ctx, statOptions(cfg.Queue), acts.StatSnapshot, cfg.FromSnapshot); err != nil {
			return nil, fmt.Errorf("create sandbox from snapshot %s: %w", cfg.FromSnapshot, err)
		}
	}
	s, err := newHandle(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// Generation 0: the first wake makes generation 1, whose id is
	// Base, as New would have.
	s.st.Generation, s.st.LastActive = 0, workflow.Now(ctx)
	s.set(ctx, StateHibernated)
	s.start(ctx)
	return s, nil
}

// newHandle draws a new sandbox's id and labels, and returns its handle,
// with nothing made yet.
func newHandle(ctx workflow.Context, cfg config) (*Sandbox, error) {
	info := workflow.GetInfo(ctx)
	labels := map[string]string{}
	for k, v := range cfg.Spec.Labels {
		labels[k] = v
	}
	labels[LabelWorkflowID] = info.WorkflowExecution.ID
	labels[LabelRunID] = info.WorkflowExecution.RunID
	// A random id, drawn once and kept in history: a retried Create
	// finds the sandbox its first attempt made.
	var id string
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return newID() }).Get(&id); err != nil {
		return nil, err
	}
	labels[LabelSandbox] = id
	// Its host fences it (pauses it) once cut from the server for half
	// of this, before the workflow could take it for lost.
	labels[activities.LabelHostTimeout] = strconv.FormatInt(cfg.hostTimeoutOrDefault().Milliseconds(), 10)
	cfg.Spec.Labels = labels
	s := &Sandbox{st: state{Config: cfg, Base: id, Generation: 1}, beat: heartbeatTimeout(ctx)}
	s.st.Checkpoint, s.st.OwnCheckpoint = cfg.FromSnapshot, cfg.OwnSnapshot
	return s, nil
}

// start serves the handle's queries and starts its watchers.
func (s *Sandbox) start(ctx workflow.Context) {
	s.serve(ctx)
	workflow.Go(ctx, s.watchIdle)
	workflow.Go(ctx, s.watchExpiry)
}

// provision creates a sandbox with the given id, on a worker that
// serves its provider, and fills its workspace from the checkpoint, if
// there is one.
func (s *Sandbox) provision(ctx workflow.Context, prov, id string) (refs.Sandbox, error) {
	return s.fill(ctx, s.create(ctx, prov, id))
}

// creation is a sandbox being made: the Create activity, and the queue
// it was scheduled on. An empty queue means it was not: made holds why.
type creation struct {
	made  workflow.Future
	queue string
}

// create starts making a sandbox with the given id and the handle's
// spec; fill waits for it and fills its workspace. Between the two, the
// workflow may do other work, as Switch does.
func (s *Sandbox) create(ctx workflow.Context, prov, id string) creation {
	spec := s.st.Config.Spec
	spec.ID = id
	if workflow.GetVersion(ctx, placeVersion, workflow.DefaultVersion, 1) == 1 {
		made, settle := workflow.NewFuture(ctx)
		workflow.Go(ctx, func(ctx workflow.Context) { settle.Set(s.place(ctx, prov, spec)) })
		return creation{queue: activities.ProviderQueue(s.st.Config.Queue, prov), made: made}
	}
	queue, err := s.createQueue(ctx, prov)
	if err != nil {
		failed, settle := workflow.NewFuture(ctx)
		settle.SetError(err)
		return creation{made: failed}
	}
	// Creation runs to its end even when the workflow is canceled
	// meanwhile, so that what it made is known, and destroyed.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	return creation{queue: queue, made: workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, s.lifecycle(queue)), acts.Create,
		activities.CreateInput{Provider: prov, Spec: spec})}
}

// fill waits for the sandbox create started and restores the
// checkpoint, if there is one, into its workspace. A sandbox that cannot
// be filled, or that was made after ctx was canceled, is destroyed.
func (s *Sandbox) fill(ctx workflow.Context, c creation) (refs.Sandbox, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if c.queue == "" {
		return refs.Sandbox{}, c.made.Get(dctx, nil)
	}
	made, err := result[refs.Sandbox](dctx, c.made, c.queue)
	ref := made
	if err != nil {
		return ref, err
	}
	if ctx.Err() != nil {
		s.destroy(dctx, ref)
		return ref, temporal.NewCanceledError("canceled while the sandbox was being created")
	}
	if s.st.Checkpoint != "" {
		restored, err := call[activities.RestoreOutput](ctx, s.transfer(ref.Queue), acts.Restore,
			activities.RestoreInput{Sandbox: made, Snapshot: s.st.Checkpoint})
		if err != nil {
			s.destroy(dctx, ref)
			return ref, fmt.Errorf("fill the workspace: %w", err) // the error names the snapshot
		}
		s.st.RestoredFrom, s.st.RestoredAt = s.st.Checkpoint, restored.At
	}
	return ref, nil
}

func newID() string { return "sb-" + randid.Hex(10) }

// ID is the id of the sandbox at its provider. It changes when the
// sandbox is re-created: after a hibernation, a recovery or a switch.
func (s *Sandbox) ID() string { return s.st.Ref.ID }

// Served are the blob store prefixes of what the sandbox stored, in all
// its incarnations (Base, Base-2, ...): its commands' outputs, files
// read, exports. A workflow hands them to relay.Serve (package transfer/relay), so that front
// ends read them through it, and through no other workflow.
func (s *Sandbox) Served() []string {
	if s == nil || s.st.Base == "" {
		return nil
	}
	var ps []string
	for g := 1; g <= s.st.Generation; g++ {
		id := incarnation(s.st.Base, g)
		for _, p := range []string{transfer.Outputs, transfer.Files, transfer.Exports} {
			ps = append(ps, p+id+"/")
		}
	}
	return ps
}

// incarnation is the id of generation g of the sandbox first made as
// base.
func incarnation(base string, g int) string {
	if g == 1 {
		return base
	}
	return fmt.Sprintf("%s-%d", base, g)
}

// Ref is the sandbox's reference, to hand to another workflow.
func (s *Sandbox) Ref() refs.Sandbox { return s.st.Ref }

// State is where the sandbox is in its lifecycle.
func (s *Sandbox) State() State { return s.st.State }

// Status describes a sandbox, for queries.
type Status struct {
	ID       string `json:"id"`
	Provider string `json:"provider"`
	// Image is the image its root filesystem comes from; empty is the
	// provider's default.
	Image      string    `json:"image,omitempty"`
	State      State     `json:"state"`
	Generation int       `json:"generation"`
	Commands   int       `json:"commands"`
	Checkpoint string    `json:"checkpoint,omitempty"`
	LastActive time.Time `json:"last_active"`
	// Resources are the limits asked for; zero fields are the provider's
	// defaults.
	Resources provider.Resources `json:"resources,omitzero"`
	// Network is the sandbox's network policy.
	Network provider.Network `json:"network,omitzero"`
	// OutputStored is the command output stored so far, which counts
	// against the sandbox's output budget.
	OutputStored int64 `json:"output_stored,omitempty"`
	// Held is how long a sandbox has existed (running or paused) up to
	// HeldSince, when it has been held since, without a break; Active
	// and ActiveSince are the same for the time commands ran. A caller
	// adds the time since to each: a query cannot read the clock.
	Held        time.Duration `json:"held"`
	HeldSince   time.Time     `json:"held_since,omitzero"`
	Active      time.Duration `json:"active"`
	ActiveSince time.Time     `json:"active_since,omitzero"`
	// MovesAt is when the sandbox is to move to a new one because its
	// provider's service would end it (see expiry.go); zero on a
	// provider with no such limit.
	MovesAt time.Time `json:"moves_at,omitzero"`
	// NotYetMade says that the sandbox started hibernated
	// (StartHibernated) and was never woken: nothing exists at the
	// provider, ID is empty, and the first operation makes it, as
	// WillBe, from Checkpoint (an empty workspace when that is empty).
	NotYetMade bool   `json:"not_yet_made,omitempty"`
	WillBe     string `json:"will_be,omitempty"`
}

// Status describes the sandbox.
func (s *Sandbox) Status() Status {
	st := Status{ID: s.st.Ref.ID, Provider: s.st.Ref.Provider, Image: s.st.Config.Spec.Image, State: s.st.State,
		Generation: s.st.Generation, Commands: s.st.Commands,
		Checkpoint: s.st.Checkpoint, LastActive: s.st.LastActive,
		Resources: s.st.Config.Spec.Resources, Network: s.st.Config.Spec.Network, OutputStored: s.st.OutputStored,
		Held: s.st.Held, HeldSince: s.st.HeldSince, Active: s.st.Active, ActiveSince: s.st.ActiveSince,
		MovesAt: s.movesAt()}
	if s.st.Generation == 0 && s.st.State == StateHibernated {
		st.Provider, st.NotYetMade, st.WillBe = s.st.Config.Provider, true, s.st.Base
	}
	return st
}

// Result is what became of a command.
type Result struct {
	ID       string // the command's id in the sandbox's journal
	ExitCode int
	Signal   string // the signal that ended it, if one did
	// Stdout and Stderr are the output, whole when small; when Truncated
	// they hold its head and tail, and Output has the whole.
	Stdout, Stderr string
	Truncated      bool
	Output         [2]transfer.Output // stdout, stderr
	Duration       time.Duration
}

// Exec runs a shell command line in the sandbox and waits for it. When
// the command timed out or ran out of memory, Exec returns its result and
// an error wrapping errdefs.ErrTimeout or errdefs.ErrOutOfMemory.
func (s *Sandbox) Exec(ctx workflow.Context, cmd string, opts ...ExecOption) (Result, error) {
	return s.exec(ctx, activities.ExecInput{Shell: cmd}, cmd, opts)
}

// ExecArgv runs a program with arguments, without a shell.
func (s *Sandbox) ExecArgv(ctx workflow.Context, argv []string, opts ...ExecOption) (Result, error) {
	return s.exec(ctx, activities.ExecInput{Argv: argv}, strings.Join(argv, " "), opts)
}

func (s *Sandbox) exec(ctx workflow.Context, in activities.ExecInput, line string, opts []ExecOption) (Result, error) {
	cfg := execConfig{timeout: DefaultExecTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	in.Env, in.Dir, in.Timeout, in.Stdin, in.MaxOutput = cfg.env, cfg.dir, cfg.timeout, cfg.stdin, s.outputCap(cfg.maxOut)
	in.TTY, in.Input = cfg.tty, cfg.input
	var res Result
	err := s.do(ctx, "exec "+shorten(line), func(ref refs.Sandbox) error {
		s.st.Commands++
		in.Sandbox, in.ID = ref, fmt.Sprintf("%s-c%d", ref.ID, s.st.Commands)
		if cfg.key != "" {
			sum := sha256.Sum256([]byte(cfg.key))
			in.ID = ref.ID + "-k" + hex.EncodeToString(sum[:10])
		}
		if cfg.started != nil {
			cfg.started(in.ID)
		}
		s.commandStarted(ctx)
		out, err := s.runExec(ctx, in)
		s.commandEnded(ctx)
		if err != nil {
			return err
		}
		for _, o := range []transfer.Output{out.Stdout, out.Stderr} {
			if o.Blob != "" {
				s.st.OutputStored += o.Size - o.Dropped
			}
		}
		res = Result{
			ID: in.ID, ExitCode: out.ExitCode, Signal: out.Signal,
			Stdout: string(out.Stdout.Inline), Stderr: string(out.Stderr.Inline),
			Truncated: out.Stdout.Truncated || out.Stderr.Truncated,
			Output:    [2]transfer.Output{out.Stdout, out.Stderr},
			Duration:  out.Duration,
		}
		switch {
		case out.TimedOut:
			return fmt.Errorf("%w: command ran past its %v timeout", errdefs.ErrTimeout, cfg.timeout)
		case out.OOMKilled:
			return fmt.Errorf("%w: the sandbox reached its memory limit", errdefs.ErrOutOfMemory)
		}
		return nil
	})
	return res, err
}

// Signal sends sig (see provider.ParseSignal) to the running command id,
// the id OnStart gave, and the processes it started. A command that has
// ended is not an error.
func (s *Sandbox) Signal(ctx workflow.Context, id, sig string) error {
	name, err := provider.ParseSignal(sig)
	if err != nil {
		return err
	}
	return s.do(ctx, "", func(ref refs.Sandbox) error {
		_, err := call[struct{}](ctx, s.opts(ref.Queue, 0), acts.Signal,
			activities.SignalInput{Sandbox: ref, ID: id, Signal: name})
		return err
	})
}

// outputCap is what each output stream of the next command may store:
// the command's own cap, within what is left of the sandbox's budget.
func (s *Sandbox) outputCap(asked int64) int64 {
	if asked <= 0 {
		asked = transfer.DefaultMaxOutput
	}
	budget := s.st.Config.OutputBudget
	if budget == 0 {
		budget = DefaultOutputBudget
	}
	if budget < 0 {
		return asked
	}
	// Each stream may take what is left: a command can overshoot the
	// budget by one cap, never more.
	return min(asked, max(budget-s.st.OutputStored, spentBudgetCap))
}

// localExecVersion marks workflows that run commands through ExecLocal
// first; histories from before it replay without.
const localExecVersion = "berth.local-exec"

// runExec runs a command. When this workflow's worker may be the
// sandbox's host, it tries the command as a local activity first: a
// short command's result then comes back without a round trip through
// the server, and a longer one is handed over, still running, to the
// Exec activity on the same worker.
func (s *Sandbox) runExec(ctx workflow.Context, in activities.ExecInput) (activities.ExecOutput, error) {
	// A command on a terminal is fed its input by the activity that
	// follows it, which a local activity would hold up a workflow task
	// for.
	if in.TTY == nil && in.Sandbox.Queue != s.st.notLocal && workflow.GetVersion(ctx, localExecVersion, workflow.DefaultVersion, 1) == 1 {
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: activities.LocalWindow + opTimeout,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		})
		var out activities.LocalExecOutput
		err := workflow.ExecuteLocalActivity(lctx, acts.ExecLocal, in).Get(ctx, &out)
		switch {
		case err == nil && out.Elsewhere:
			s.st.notLocal = in.Sandbox.Queue
		case err == nil && !out.Handed:
			return out.ExecOutput, nil
		case err != nil && (ctx.Err() != nil || errdefs.KindOf(temporalerr.From(err)) != errdefs.Internal):
			// Canceled, or a provider error the activity would get too.
			return out.ExecOutput, temporalerr.From(err)
		}
		// Otherwise the Exec activity takes over, or attaches to what
		// the local activity started.
	}
	return call[activities.ExecOutput](ctx, s.opts(in.Sandbox.Queue, in.Timeout), acts.Exec, in)
}

// WriteFiles writes files into the workspace. Their contents enter
// workflow history, so they are bounded by transfer.MaxInlineFiles.
func (s *Sandbox) WriteFiles(ctx workflow.Context, files ...provider.File) error {
	names := make([]string, len(files))
	for i, f := range files {
		names[i] = f.Path
	}
	return s.do(ctx, "write "+shorten(strings.Join(names, ", ")), func(ref refs.Sandbox) error {
		_, err := call[struct{}](ctx, s.opts(ref.Queue, 0), acts.WriteFiles,
			activities.WriteFilesInput{Sandbox: ref, Files: files})
		return err
	})
}

// Import unpacks a tar stream that a front end stored in the output blob
// store (under transfer.Uploads), in parts (zero: one object),
// into the workspace: how files too large for history get in.
func (s *Sandbox) Import(ctx workflow.Context, blob string, parts int) error {
	return s.do(ctx, "import "+shorten(blob), func(ref refs.Sandbox) error {
		_, err := call[struct{}](ctx, s.transfer(ref.Queue), acts.Import,
			activities.ImportInput{Sandbox: ref, Blob: blob, Parts: parts})
		return err
	})
}

// ErrTooLarge is returned with the head of a file too large to carry
// through workflow history whole.
var ErrTooLarge = errors.New("file too large to read inline")

// ReadFile reads a file of the workspace. A file larger than
// transfer.DefaultInlineCap comes back as its head, with ErrTooLarge.
func (s *Sandbox) ReadFile(ctx workflow.Context, path string) ([]byte, error) {
	out, err := s.ReadFileOutput(ctx, path)
	if err != nil {
		return nil, err
	}
	if out.Truncated {
		return out.Head(), fmt.Errorf("%w: %s has %d bytes", ErrTooLarge, path, out.Size)
	}
	return out.Inline, nil
}

// ReadFileOutput reads a file of the workspace whole: inline when it is
// small, else its head inline and the whole in the blob store, for a
// front end to fetch (transfer.Open).
func (s *Sandbox) ReadFileOutput(ctx workflow.Context, path string) (transfer.Output, error) {
	var out transfer.Output
	err := s.do(ctx, "", func(ref refs.Sandbox) (err error) {
		out, err = call[transfer.Output](ctx, s.opts(ref.Queue, 0), acts.ReadFile,
			activities.ReadFileInput{Sandbox: ref, Path: path})
		return err
	})
	return out, err
}

// Export writes the file or directory at path as a tar stream into the
// worker's blob store, for a front end to fetch: the result locates it
// (see provider.PathExporter for its names). Whoever fetches it deletes
// it.
func (s *Sandbox) Export(ctx workflow.Context, path string) (transfer.Output, error) {
	var out transfer.Output
	err := s.do(ctx, "", func(ref refs.Sandbox) (err error) {
		out, err = call[transfer.Output](ctx, s.transfer(ref.Queue), acts.ExportPath,
			activities.PathInput{Sandbox: ref, Path: path})
		return err
	})
	return out, err
}

// ListFiles lists a directory of the workspace.
func (s *Sandbox) ListFiles(ctx workflow.Context, path string) ([]provider.FileInfo, error) {
	var infos []provider.FileInfo
	err := s.do(ctx, "", func(ref refs.Sandbox) (err error) {
		infos, err = call[[]provider.FileInfo](ctx, s.opts(ref.Queue, 0), acts.ListDir,
			activities.PathInput{Sandbox: ref, Path: path})
		return err
	})
	return infos, err
}

// Remove removes a file or a directory tree of the workspace.
func (s *Sandbox) Remove(ctx workflow.Context, path string) error {
	return s.do(ctx, "remove "+shorten(path), func(ref refs.Sandbox) error {
		_, err := call[struct{}](ctx, s.opts(ref.Queue, 0), acts.Remove,
			activities.PathInput{Sandbox: ref, Path: path})
		return err
	})
}

// Stop destroys the sandbox and its internal checkpoint. It runs even
// when ctx is canceled, so that a canceled workflow still cleans up;
// stopping twice does nothing.
func (s *Sandbox) Stop(ctx workflow.Context) error {
	if s.detached {
		return nil
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	if err := workflow.Await(ctx, func() bool { return !s.st.busy && s.st.behind == 0 }); err != nil {
		return err
	}
	if s.st.State == StateStopped {
		return nil
	}
	switch {
	case s.st.State == StateHibernated:
	case s.st.State == StateLost && s.st.GoneHost == s.st.Ref.Queue &&
		workflow.GetVersion(ctx, stopGoneVersion, workflow.DefaultVersion, 1) == 1:
		// Its host took no operation within the host timeout: a Destroy
		// there would wait as long again, for nothing. Should the host
		// come back, its reaper destroys the sandbox, which no handle
		// holds any more (docs/hosts.md).
		workflow.GetLogger(ctx).Info("stop: the sandbox's host is gone; its reaper destroys it if it returns",
			"sandbox", s.st.Ref.ID, "queue", s.st.Ref.Queue)
	default:
		_, err := call[struct{}](ctx, s.lifecycle(s.st.Ref.Queue), acts.Destroy, s.st.Ref)
		if err != nil && !errors.Is(err, errdefs.ErrSandboxLost) {
			return fmt.Errorf("stop sandbox %s: %w", s.st.Ref.ID, err)
		}
	}
	s.dropCheckpoint(ctx)
	s.dropNative(ctx)
	s.set(ctx, StateStopped)
	return nil
}

// stopGoneVersion marks the histories whose Stop sends nothing to the
// host of a sandbox found lost because that host was gone.
const stopGoneVersion = "berth.stop-gone-host"

// shorten keeps descriptions of operations short in history and errors.
func shorten(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max-3] + "..."
}

// call runs one activity and turns its failure back into the provider
// error it was. An operation no worker picked up in time means the
// sandbox's host is gone: the sandbox is lost.
func call[T any](ctx workflow.Context, opts workflow.ActivityOptions, activity, in any) (T, error) {
	return result[T](ctx, workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activity, in), opts.TaskQueue)
}

// result waits for an activity scheduled on queue and returns its
// result, its error as call's.
func result[T any](ctx workflow.Context, f workflow.Future, queue string) (T, error) {
	var out T
	err := f.Get(ctx, &out)
	if err == nil {
		return out, nil
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
		// The timeout's cause is the failure of an earlier attempt, one
		// the host took: without one, the operation never started.
		return out, &hostGoneError{queue: queue, err: err, notStarted: errors.Unwrap(timeout) == nil}
	}
	return out, temporalerr.From(err)
}

// hostGoneError is an operation no worker of the sandbox's host took
// within the host timeout: the host is gone, and the sandbox lost.
type hostGoneError struct {
	queue      string
	err        error
	notStarted bool // no attempt of the operation ever started
}

func (e *hostGoneError) Error() string {
	return fmt.Sprintf("%v: no worker serves its host (queue %s): %v", errdefs.ErrSandboxLost, e.queue, e.err)
}

func (e *hostGoneError) Unwrap() []error { return []error{errdefs.ErrSandboxLost, e.err} }

// HandleState is a handle's state, to carry it across continue-as-new: put
// it in the new run's input and get the handle back with Reattach.
type HandleState struct {
	State state `json:"state"`
}

// Busy reports whether an operation or a transition is in flight.
func (s *Sandbox) Busy() bool { return s.st.busy || s.st.inflight > 0 || s.st.behind > 0 }

// Carry detaches the handle and returns its state; call it when the
// handle is not Busy. The handle is then done: Stop does nothing, so
// that the run that ends does not destroy the sandbox its successor
// carries on with.
func (s *Sandbox) Carry() HandleState {
	c := HandleState{State: s.st}
	s.st.busy, s.detached = true, true // nothing may use it any more
	return c
}

// Reattach gets back a handle carried across continue-as-new, with its
// idle watcher.
func Reattach(ctx workflow.Context, c HandleState) *Sandbox {
	s := &Sandbox{st: c.State, beat: heartbeatTimeout(ctx)}
	s.st.busy, s.st.inflight = false, 0
	s.serve(ctx)
	workflow.Go(ctx, s.watchIdle)
	workflow.Go(ctx, s.watchExpiry)
	return s
}
