package sandbox

import (
	"fmt"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
)

// Provider chooses where a sandbox lives.
type Provider struct {
	// Name is a registered provider name ("linux"). Its JSON key stays
	// "type": histories and Update payloads hold it.
	Name string `json:"type"`
	// Image is the image the sandbox's root filesystem comes from, for
	// providers that have images (docker; linux and gvisor from a Docker
	// image on their host). Empty means the provider's default.
	Image string `json:"image,omitempty"`
}

// DefaultQueue is the task queue every berth worker polls. A sandbox is
// created on its provider's queue among those of DefaultQueue's workers
// (see activities.ProviderQueue), and operated on its host's.
const DefaultQueue = "berth"

// DefaultProvider is the provider front ends ask for when the user names
// none: the one that needs nothing installed.
const DefaultProvider = "linux"

// Lifecycle defaults.
const (
	// DefaultIdleTimeout is how long a sandbox waits for an operation
	// before it pauses.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultHibernateAfter is how long a sandbox waits for an operation
	// before it is checkpointed and destroyed.
	DefaultHibernateAfter = 30 * time.Minute
	// NoIdleTimeout, given to WithIdleTimeout or WithHibernateAfter, turns
	// that step off.
	NoIdleTimeout time.Duration = -1
)

// Recovery says what happens when a sandbox is found lost.
type Recovery int

const (
	// Reprovision re-creates a lost sandbox and restores its last
	// checkpoint. It is the default.
	Reprovision Recovery = iota
	// Fail leaves a lost sandbox lost: every later operation fails with
	// errdefs.ErrSandboxLost.
	Fail
)

// Option configures a sandbox.
type Option func(*config)

// config is a sandbox's settings. It is kept in workflow state, so that a
// handle can be carried across continue-as-new.
type config struct {
	Provider        string        `json:"provider"`
	Spec            provider.Spec `json:"spec"`
	Queue           string        `json:"queue"`
	IdleTimeout     time.Duration `json:"idle_timeout"`
	HibernateAfter  time.Duration `json:"hibernate_after"`
	NoAutoResume    bool          `json:"no_auto_resume,omitempty"`
	Recovery        Recovery      `json:"recovery,omitempty"`
	CheckpointEvery int           `json:"checkpoint_every,omitempty"`
	// CheckpointInterval and CheckpointIdle are the rest of the
	// checkpoint policy (CheckpointPolicy).
	CheckpointInterval time.Duration `json:"checkpoint_interval,omitempty"`
	CheckpointIdle     time.Duration `json:"checkpoint_idle,omitempty"`
	FromSnapshot       string        `json:"from_snapshot,omitempty"`
	OwnSnapshot        bool          `json:"own_snapshot,omitempty"`
	HostTimeout        time.Duration `json:"host_timeout,omitempty"`
	OutputBudget       int64         `json:"output_budget,omitempty"`
	// PlacementTimeout is how long a creation waits for a host with room.
	PlacementTimeout time.Duration `json:"placement_timeout,omitempty"`
}

func newConfig(p Provider, opts []Option) config {
	cfg := config{
		Provider: p.Name, Queue: DefaultQueue,
		IdleTimeout: DefaultIdleTimeout, HibernateAfter: DefaultHibernateAfter,
	}
	cfg.Spec.Image = p.Image
	for _, o := range opts {
		o(&cfg)
	}
	// The idle timeout is the lease too: a sandbox whose host is gone
	// (no renewal, no operation) stops its own processes after as long
	// as the workflow would have paused it.
	cfg.Spec.Lease = 0
	if cfg.IdleTimeout > 0 {
		cfg.Spec.Lease = max(cfg.IdleTimeout, provider.MinLease)
	}
	return cfg
}

// validate checks the settings a sandbox is made with, so that bad ones
// fail as bad input before any activity runs.
func (c config) validate() error {
	if c.Provider == "" {
		return fmt.Errorf("%w: no provider", errdefs.ErrBadInput)
	}
	if c.PlacementTimeout < 0 {
		return fmt.Errorf("%w: negative placement timeout", errdefs.ErrBadInput)
	}
	if err := ValidateHostTimeout(c.HostTimeout); err != nil {
		return err
	}
	if err := (CheckpointPolicy{Every: c.CheckpointEvery, Interval: c.CheckpointInterval, Idle: c.CheckpointIdle}).Validate(); err != nil {
		return err
	}
	if c.FromSnapshot != "" {
		if err := provider.ValidateID(c.FromSnapshot); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return provider.ValidateSpec(c.Spec)
}

// WithResources sets the sandbox's limits.
func WithResources(r provider.Resources) Option { return func(c *config) { c.Spec.Resources = r } }

// WithEnv adds environment variables to every command. Values enter
// workflow history: pass no secrets.
func WithEnv(env map[string]string) Option { return func(c *config) { c.Spec.Env = env } }

// WithLabels adds labels to the sandbox.
func WithLabels(labels map[string]string) Option { return func(c *config) { c.Spec.Labels = labels } }

// WithMaxLifetime sets the sandbox's hard lifetime; zero means
// provider.DefaultLifetime.
func WithMaxLifetime(d time.Duration) Option { return func(c *config) { c.Spec.Lifetime = d } }

// WithIdleTimeout pauses the sandbox when no operation has come for d
// (natively where the provider can; elsewhere it hibernates). Zero means
// DefaultIdleTimeout; NoIdleTimeout never pauses it.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) {
		if d == 0 {
			d = DefaultIdleTimeout
		}
		c.IdleTimeout = d
	}
}

// WithHibernateAfter checkpoints and destroys the sandbox when no
// operation has come for d, so that it holds no memory and no disk. Zero
// means DefaultHibernateAfter; NoIdleTimeout never hibernates it.
func WithHibernateAfter(d time.Duration) Option {
	return func(c *config) {
		if d == 0 {
			d = DefaultHibernateAfter
		}
		c.HibernateAfter = d
	}
}

// DisableAutoResume makes operations on a paused or hibernated sandbox
// fail with an error wrapping errdefs.ErrSandboxPaused instead of resuming it.
func DisableAutoResume() Option { return func(c *config) { c.NoAutoResume = true } }

// WithRecovery says what to do when the sandbox is found lost.
func WithRecovery(r Recovery) Option { return func(c *config) { c.Recovery = r } }

// WithCheckpointEvery checkpoints the workspace after every n mutating
// operations (commands, writes, removals). Zero, the default, checkpoints
// only before hibernating.
func WithCheckpointEvery(n int) Option { return func(c *config) { c.CheckpointEvery = n } }

// CheckpointPolicy says when a running sandbox's workspace is
// checkpointed, besides before it hibernates. A checkpoint is what a
// sandbox found lost (its host gone) comes back from: what changed
// after it is lost, and named in the LostError. Each rule that is set
// applies; the zero policy checkpoints only before hibernating. A
// checkpoint is taken only when something changed since the last one,
// and stores only the chunks that changed (docs/workflows.md measures
// the cost).
type CheckpointPolicy struct {
	// Every checkpoints after every Every mutating operations
	// (commands, writes, removals), as the operation ends.
	Every int `json:"every,omitempty"`
	// Interval checkpoints at most Interval after the first change not
	// yet checkpointed, once no operation is in flight: it bounds how
	// much time of work a lost host can cost.
	Interval time.Duration `json:"interval,omitempty"`
	// Idle checkpoints once no operation has come for Idle, if
	// something changed: an agent's workspace between turns. An idle
	// checkpoint due after the idle timeout is taken as the sandbox
	// pauses.
	Idle time.Duration `json:"idle,omitempty"`
}

// MinCheckpointInterval is the shortest Interval or Idle a
// CheckpointPolicy may have: a checkpoint reads the workspace's changed
// files and writes them to the blob store.
const MinCheckpointInterval = time.Second

// Validate checks the policy's rules: none negative, and the times at
// least MinCheckpointInterval.
func (p CheckpointPolicy) Validate() error {
	if p.Every < 0 {
		return fmt.Errorf("%w: checkpoint every %d: want 0 (never) or more", errdefs.ErrBadInput, p.Every)
	}
	for _, r := range []struct {
		name string
		d    time.Duration
	}{{"interval", p.Interval}, {"idle", p.Idle}} {
		if r.d < 0 {
			return fmt.Errorf("%w: checkpoint %s %v is negative", errdefs.ErrBadInput, r.name, r.d)
		}
		if r.d > 0 && r.d < MinCheckpointInterval {
			return fmt.Errorf("%w: checkpoint %s %v is under the least, %v", errdefs.ErrBadInput, r.name, r.d, MinCheckpointInterval)
		}
	}
	return nil
}

// WithCheckpoint sets the sandbox's checkpoint policy.
func WithCheckpoint(p CheckpointPolicy) Option {
	return func(c *config) {
		c.CheckpointEvery, c.CheckpointInterval, c.CheckpointIdle = p.Every, p.Interval, p.Idle
	}
}

// WithHostTimeout sets how long an operation on a host-bound sandbox
// waits for a worker of the sandbox's host before the sandbox is taken
// for lost (and, under Reprovision, re-created on another host from its
// checkpoint). Zero means DefaultHostTimeout.
func WithHostTimeout(d time.Duration) Option { return func(c *config) { c.HostTimeout = d } }

// DefaultHostTimeout is how long an operation waits for the sandbox's
// host by default; a host timeout set is within MinHostTimeout and
// MaxHostTimeout. The host's worker fences the sandbox (pauses it) once
// it has been cut from the server for half of it (hostworker), so that
// its copy there is stopped before its workflow could make another.
const (
	DefaultHostTimeout = time.Minute
	// MinHostTimeout leaves a host's worker room to fence its sandboxes
	// (at half of it) before they are taken for lost.
	MinHostTimeout = 2 * time.Second
	// MaxHostTimeout is a sandbox's default lifetime: waiting longer for
	// its host would outlast the sandbox.
	MaxHostTimeout = provider.DefaultLifetime
)

// hostTimeoutOrDefault is the host timeout the sandbox's operations wait.
func (c config) hostTimeoutOrDefault() time.Duration {
	if c.HostTimeout > 0 {
		return c.HostTimeout
	}
	return DefaultHostTimeout
}

// ValidateHostTimeout checks a host timeout: zero (the default), or
// within MinHostTimeout and MaxHostTimeout.
func ValidateHostTimeout(d time.Duration) error {
	if d != 0 && (d < MinHostTimeout || d > MaxHostTimeout) {
		return fmt.Errorf("%w: host timeout %v: want between %v and %v (0 for the default, %v)",
			errdefs.ErrBadInput, d, MinHostTimeout, MaxHostTimeout, DefaultHostTimeout)
	}
	return nil
}

// FromSnapshot makes the new sandbox's workspace a copy of a snapshot's.
// The snapshot stays the caller's.
func FromSnapshot(id string) Option { return func(c *config) { c.FromSnapshot = id } }

// FromCheckpoint is FromSnapshot for a snapshot made for this sandbox
// alone (the one a fork is made from): the sandbox keeps it as its
// checkpoint and deletes it when it has a newer one or stops.
func FromCheckpoint(id string) Option {
	return func(c *config) { c.FromSnapshot, c.OwnSnapshot = id, true }
}

// ExecOption configures one command.
type ExecOption func(*execConfig)

type execConfig struct {
	timeout time.Duration
	env     map[string]string
	dir     string
	stdin   []byte
	started func(commandID string)
	key     string
	maxOut  int64
	tty     *provider.TerminalSize
	input   string
}

// WithExecTimeout ends the command, and every process it started, after d.
// Zero means DefaultExecTimeout.
func WithExecTimeout(d time.Duration) ExecOption { return func(c *execConfig) { c.timeout = d } }

// WithExecEnv adds environment variables to this command.
func WithExecEnv(env map[string]string) ExecOption { return func(c *execConfig) { c.env = env } }

// WithDir sets the command's working directory, a workspace path.
func WithDir(dir string) ExecOption { return func(c *execConfig) { c.dir = dir } }

// WithStdin gives the command a standard input. It enters workflow
// history.
func WithStdin(b []byte) ExecOption { return func(c *execConfig) { c.stdin = b } }

// OnStart calls f with the command's id just before the command is sent
// to the sandbox, once it is resumed if it had to be: with
// transfer.OutputKey, where its output will be stored, so that a front
// end can follow it live. f runs in workflow code.
func OnStart(f func(commandID string)) ExecOption { return func(c *execConfig) { c.started = f } }

// WithTerminal runs the command on a terminal of the given size, whose
// input (keys and resizes, transfer.TerminalEvent) a front end writes as
// the upload stream input of the workflow (transfer.TerminalInputKey).
// Its output is stdout alone. A command on a terminal is never run again
// by a recovery: lost with its sandbox, it fails with a LostError.
func WithTerminal(size provider.TerminalSize, input string) ExecOption {
	return func(c *execConfig) { c.tty, c.input = &size, input }
}

// DefaultOutputBudget is how much command output one sandbox stores in
// all, by default.
const DefaultOutputBudget = 4 << 30

// spentBudgetCap is what each stream of a command keeps once the
// sandbox's output budget is spent: its first and last 512 KiB.
const spentBudgetCap = 1 << 20

// WithOutputBudget bounds the command output the sandbox stores in all
// (zero: DefaultOutputBudget; negative: no bound). Each command's cap
// (WithMaxOutput) shrinks to what is left of it, so that the sandbox
// stores at most its budget and one command's output; once it is spent,
// each command keeps its first and last 512 KiB per stream.
func WithOutputBudget(n int64) Option { return func(c *config) { c.OutputBudget = n } }

// WithKey names the command by a key of the caller's, stable across
// retries, instead of by its rank among the handle's commands: a command
// sent again with the same key (an Update sent again after a restart,
// whose handlers may then run in another order) attaches to the one the
// first try started instead of running again. The key is hashed: any
// string will do.
func WithKey(key string) ExecOption { return func(c *execConfig) { c.key = key } }

// WithMaxOutput caps what is stored of each of the command's output
// streams; past it, its first and last bytes are kept, and the result
// says how many were dropped. Zero means transfer.DefaultMaxOutput.
func WithMaxOutput(n int64) ExecOption { return func(c *execConfig) { c.maxOut = n } }

// DefaultExecTimeout bounds commands that name no timeout.
const DefaultExecTimeout = 10 * time.Minute

// Timeouts of the activities, in one place.
const (
	// opTimeout bounds short operations (files, create, destroy).
	opTimeout = 2 * time.Minute
	// transferTimeout bounds snapshots and restores, and
	// transferHeartbeat is their heartbeat timeout: short, because their
	// heartbeats carry the progress front ends show.
	transferTimeout   = 30 * time.Minute
	transferHeartbeat = 5 * time.Second
	// askTimeout bounds the local activities that ask the server about
	// its workers (where to create a sandbox, which hosts there are).
	askTimeout = 10 * time.Second
	// hostAnswerTimeout is how long Providers waits for each host to
	// take its question before showing it unreachable.
	hostAnswerTimeout = 5 * time.Second
)

// DefaultHeartbeatTimeout is the heartbeat timeout of the activities
// that heartbeat as they run (commands, creations, destructions; they
// heartbeat every 2 s): missing this long, the activity's worker is taken
// for dead and the activity retried elsewhere, attaching to what the first
// attempt started. A worker sets another for the workflows it runs with
// WithHeartbeatTimeout.
const DefaultHeartbeatTimeout = 20 * time.Second

// heartbeatKey is the workflow context key of WithHeartbeatTimeout.
type heartbeatKey struct{}

// WithHeartbeatTimeout returns ctx with the heartbeat timeout of the
// activities of sandboxes made or reattached under it (New, Reattach) and
// of Reap: how long the server waits for a worker that stopped answering
// before it retries an activity of its elsewhere. Zero means
// DefaultHeartbeatTimeout. It must be longer than a few heartbeats (2 s
// apart). A worker sets it for every workflow it runs
// (hostworker.Options.HeartbeatTimeout); it is not kept in workflow
// state, and it is no part of what a replay matches.
func WithHeartbeatTimeout(ctx workflow.Context, d time.Duration) workflow.Context {
	return workflow.WithValue(ctx, heartbeatKey{}, d)
}

// heartbeatTimeout is ctx's heartbeat timeout (WithHeartbeatTimeout).
func heartbeatTimeout(ctx workflow.Context) time.Duration {
	if d, ok := ctx.Value(heartbeatKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return DefaultHeartbeatTimeout
}

// statOptions are those of a look at the snapshot store, which any
// worker of queue serves: short, and a snapshot that is not there is
// not asked for again (NotFound is not retried).
func statOptions(queue string) workflow.ActivityOptions {
	o := sharedOptions(queue)
	o.StartToCloseTimeout = askTimeout
	return o
}

// localOptions are those of the local activities that ask the server
// about its workers: an error of the server's is retried a few times.
func localOptions() workflow.LocalActivityOptions {
	return workflow.LocalActivityOptions{
		StartToCloseTimeout: askTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 2 * time.Second, MaximumAttempts: 5,
		},
	}
}

// sharedOptions are those of operations any worker of queue may serve:
// they wait for one as long as it takes.
func sharedOptions(queue string) workflow.ActivityOptions {
	o := activityOptions(queue)
	o.ScheduleToStartTimeout = 0
	return o
}

// activityOptions are those of the operations on a sandbox served from
// queue that do not heartbeat.
func activityOptions(queue string) workflow.ActivityOptions {
	return runOptions(queue, 0, 0)
}

// runOptions are those of the operations on a sandbox served from queue;
// runFor, when not zero, is how long the operation itself may run, and
// beat its heartbeat timeout.
func runOptions(queue string, runFor, beat time.Duration) workflow.ActivityOptions {
	opts := workflow.ActivityOptions{
		TaskQueue:              queue,
		ScheduleToStartTimeout: DefaultHostTimeout,
		StartToCloseTimeout:    opTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    10,
		},
	}
	if runFor > 0 {
		opts.StartToCloseTimeout = runFor + opTimeout
		opts.HeartbeatTimeout = beat
	}
	return opts
}

// lifecycleOptions are those of Create and Destroy, which heartbeat as
// they run (an image pull, a container's removal, may be long): a worker
// that dies under one is noticed within beat, its heartbeat timeout, not
// at its start-to-close timeout minutes later.
func lifecycleOptions(queue string, beat time.Duration) workflow.ActivityOptions {
	o := activityOptions(queue)
	o.HeartbeatTimeout = beat
	return o
}

// lifecycle are lifecycleOptions with the sandbox's host timeout.
func (s *Sandbox) lifecycle(queue string) workflow.ActivityOptions {
	return s.hostTimeout(lifecycleOptions(queue, s.beat))
}

// transferOptions are those of snapshots and restores.
func transferOptions(queue string) workflow.ActivityOptions {
	return runOptions(queue, transferTimeout, transferHeartbeat)
}

// nativeRetry is the retry policy of a native hibernation and wake: a
// few attempts, since berth's checkpoint serves when they fail.
func nativeRetry() *temporal.RetryPolicy {
	return &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Second, MaximumAttempts: 3}
}

// hibernateOpts are those of a native hibernation: as long as a
// snapshot may take (the provider bounds it by its own timeout, within
// transferTimeout), heartbeating.
func (s *Sandbox) hibernateOpts(queue string) workflow.ActivityOptions {
	o := s.opts(queue, transferTimeout)
	o.RetryPolicy = nativeRetry()
	return o
}

// opts are runOptions with the sandbox's heartbeat and host timeouts.
func (s *Sandbox) opts(queue string, runFor time.Duration) workflow.ActivityOptions {
	return s.hostTimeout(runOptions(queue, runFor, s.beat))
}

// transfer are transferOptions with the sandbox's host timeout.
func (s *Sandbox) transfer(queue string) workflow.ActivityOptions {
	return s.hostTimeout(transferOptions(queue))
}

// hostTimeout sets how long an operation waits for the sandbox's host.
// Operations on the queue every worker polls, or on a provider's (a
// creation), wait as long as it takes: no host of theirs can be lost,
// and the server then has no timer to keep for each of them.
func (s *Sandbox) hostTimeout(o workflow.ActivityOptions) workflow.ActivityOptions {
	switch d := s.st.Config.HostTimeout; {
	case o.TaskQueue == s.st.Config.Queue, activities.IsProviderQueue(s.st.Config.Queue, o.TaskQueue):
		o.ScheduleToStartTimeout = 0
	case d > 0:
		o.ScheduleToStartTimeout = d
	}
	return o
}
