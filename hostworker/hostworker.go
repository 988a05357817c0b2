// Package hostworker runs berth's Temporal workers on one host: one on
// the queue every berth worker polls (sandbox.DefaultQueue), for
// workflows and shared work; one per provider the host serves, on that
// provider's queue (activities.ProviderQueue), for the creation of its
// sandboxes, so that a sandbox is created by a host that can serve it;
// and one on this host's own queue, for the operations of the
// host-bound sandboxes it created. All serve the same activities over
// the host's providers. Every worker's identity names the host's queue
// (activities.Identity), which is how berth providers finds every host.
package hostworker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/session/calls"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer/relay"
	"github.com/berth-dev/berth/workflows"
)

// Options configures the workers. Providers and Outputs are required.
type Options struct {
	Providers map[string]provider.Provider
	// Outputs is the blob store for whole command outputs.
	Outputs *blob.Bucket
	// Snapshots keeps workspace snapshots; nil disables snapshots, and
	// with them hibernation, forks and recovery from checkpoints.
	Snapshots *snapshot.Store
	// Queue is the queue every berth worker polls; zero means
	// sandbox.DefaultQueue. The workers also poll, for each provider
	// served, activities.ProviderQueue(Queue, name).
	Queue string
	// HostQueue is this host's own queue; zero means Queue + "@" + the
	// host name. A single-host deployment (berth dev) sets it to Queue:
	// one worker then serves everything, and activities are dispatched
	// eagerly to the worker whose workflow scheduled them.
	HostQueue string
	// Unavailable are providers the host links but could not open, for
	// front ends to be told why (berth providers).
	Unavailable []provider.Availability
	// Workflows are registered on the generic queue's worker, beside
	// berth's own (registerWorkflows).
	Workflows []any
	// Model, when set, is the model the coding agent calls: a worker on
	// ModelQueue serves the model activity. Without it, a single-host
	// deployment (HostQueue == Queue, berth dev) serves one that fails
	// each call with errdefs.NoModel, saying what to set.
	Model *model.Config
	// ModelQueue is the model activity's queue; zero means Queue +
	// ".model" (agent.DefaultModelQueue for the default queue).
	//
	// The generic worker serves the model too when ModelQueue is Queue
	// (then no other worker does) or on a single host (HostQueue ==
	// Queue): a session whose SessionInput.ModelQueue is its own queue
	// then gets each model call handed over eagerly, in the reply to the
	// workflow task that asks for it, without a trip through the
	// server's task queues. That is only right where every worker on
	// Queue serves the model, as on one host.
	ModelQueue string
	// Relay bounds what the relay stores for front ends (uploads); zero
	// fields mean transfer's defaults.
	Relay relay.Limits
	// Parked are the sandboxes this host paused as it last stopped
	// (Host.Shutdown); nil means none.
	Parked *activities.Parked
	// StopTimeout is how long Stop lets the activities under way (the
	// commands running) finish before it cancels them; zero means at
	// once.
	StopTimeout time.Duration
	// MaxSandboxes and MaxMemory bound the sandboxes of the host-bound
	// providers (linux, docker, gvisor) this host holds: how many, and
	// the sum of their memory limits in bytes (a sandbox that asks for
	// none counts as activities.DefaultSandboxMemory until its provider
	// lists it with its limit). A creation past either is refused, and
	// placed on another host (see package sandbox, placement). Zero
	// means no bound; HostConfig has the defaults of a host.
	MaxSandboxes int
	MaxMemory    int64
	// DiskDir is a directory on the file system the sandboxes' files
	// take, and MinFreeDisk what the host keeps free there
	// (activities.Capacity); no DiskDir means no disk bound.
	DiskDir     string
	MinFreeDisk int64
	// HeartbeatTimeout is how long the server waits for the heartbeat of
	// a sandbox activity that heartbeats (a command, a creation) before it
	// takes its worker for dead and retries it elsewhere; zero means
	// sandbox.DefaultHeartbeatTimeout. Tests that kill a worker shorten it.
	HeartbeatTimeout time.Duration
	// Metrics receives what the activities measure (a Telemetry); nil
	// measures nothing.
	Metrics activities.Metrics
	// Tracer makes the activities' spans around provider calls; nil
	// traces none. The spans of workflows and activities come from the
	// SDK's tracing interceptor, on the client's options.
	Tracer trace.TracerProvider
	// Logger receives the fence's events (a host cut from the server,
	// fence.go); nil means slog.Default.
	Logger *slog.Logger
}

// Worker is the running set of workers.
type Worker struct {
	generic, host worker.Worker
	providers     []worker.Worker // one per provider served
	model         worker.Worker   // the model activity's, if any
	modelStatus   func(context.Context) (model.Status, error)
	queue         string // the generic queue
	HostQueue     string
	capacity      *activities.Capacity
	stopRenewing  context.CancelFunc
	renewing      chan struct{} // closed when renewLeases returns
}

// StartWorker starts the workers; Stop stops them. StartHost is what a
// host runs: it opens what HostConfig names and starts these.
func StartWorker(c client.Client, opts Options) (*Worker, error) {
	if len(opts.Providers) == 0 || opts.Outputs == nil {
		return nil, fmt.Errorf("hostworker: providers and an output store are required")
	}
	if opts.Queue == "" {
		opts.Queue = sandbox.DefaultQueue
	}
	if opts.HostQueue == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("hostworker: %w", err)
		}
		opts.HostQueue = opts.Queue + "@" + strings.ReplaceAll(host, "@", "_")
	}
	capacity := &activities.Capacity{MaxSandboxes: opts.MaxSandboxes, MaxMemory: opts.MaxMemory, DiskDir: opts.DiskDir, MinFreeDisk: opts.MinFreeDisk}
	acts := &activities.Activities{
		Providers: opts.Providers, Unavailable: opts.Unavailable, Outputs: opts.Outputs, Snapshots: opts.Snapshots, Client: c,
		GenericQueue: opts.Queue, HostQueue: opts.HostQueue, Parked: opts.Parked, Capacity: capacity,
		Metrics: opts.Metrics, Tracer: opts.Tracer,
	}
	w := &Worker{queue: opts.Queue, HostQueue: opts.HostQueue, capacity: capacity}
	// The relay: front ends read outputs and write uploads through the
	// server, never the disk, and only a workflow's own.
	identity := activities.Identity(opts.HostQueue)
	w.generic = worker.New(c, opts.Queue, withPollers(worker.Options{
		Identity: identity, WorkerStopTimeout: opts.StopTimeout,
		Interceptors: []interceptor.WorkerInterceptor{
			relay.Interceptor(opts.Outputs, opts.Relay), &heartbeats{timeout: opts.HeartbeatTimeout},
		},
	}))
	w.generic.RegisterActivity(acts)
	w.generic.RegisterActivity(&calls.Activities{Client: c, Outputs: opts.Outputs})
	registerWorkflows(w.generic, opts.Workflows)
	if err := w.startModel(c, opts); err != nil {
		return nil, err
	}
	if err := w.generic.Start(); err != nil {
		if w.model != nil {
			w.model.Stop()
		}
		return nil, fmt.Errorf("hostworker: start worker on %s: %w", opts.Queue, err)
	}
	// Activities only: the providers' queues and the host's carry no
	// workflow tasks.
	start := func(queue string) (worker.Worker, error) {
		aw := worker.New(c, queue, withPollers(worker.Options{Identity: identity, DisableWorkflowWorker: true, WorkerStopTimeout: opts.StopTimeout}))
		aw.RegisterActivity(acts)
		if err := aw.Start(); err != nil {
			w.Stop()
			return nil, fmt.Errorf("hostworker: start worker on %s: %w", queue, err)
		}
		return aw, nil
	}
	names := make([]string, 0, len(opts.Providers))
	for name := range opts.Providers {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		pw, err := start(activities.ProviderQueue(opts.Queue, name))
		if err != nil {
			return nil, err
		}
		w.providers = append(w.providers, pw)
	}
	if opts.HostQueue != opts.Queue {
		var err error
		if w.host, err = start(opts.HostQueue); err != nil {
			return nil, err
		}
	}
	var ctx context.Context
	ctx, w.stopRenewing = context.WithCancel(context.Background())
	w.renewing = make(chan struct{})
	// A host of several (its own queue) fences its sandboxes when cut
	// from the server (fence); one alone (berth dev) runs the server
	// too, and no other host could make a second copy.
	var f *fence
	if opts.HostQueue != opts.Queue {
		f = &fence{c: c, acts: acts, providers: opts.Providers, parked: opts.Parked, hostQueue: opts.HostQueue, log: fenceLogger(opts.Logger)}
	}
	go func() {
		defer close(w.renewing)
		var wg sync.WaitGroup
		wg.Go(func() { renewLeases(ctx, opts.Providers, capacity, slog.Default()) })
		if f != nil {
			wg.Go(func() { f.run(ctx) })
		}
		wg.Wait()
	}()
	return w, nil
}

// withPollers gives a worker's options poller autoscaling, for workflow
// and activity tasks: the SDK keeps at least one poll open on each
// queue it serves, the workflow queue as well as its own sticky one,
// and adds pollers (up to maxPollers a queue, and a workflow queue's
// sticky queue apart) as the server finds tasks waiting.
//
// The SDK's default, 2 pollers, sends every poll to the sticky queue
// while that queue has a backlog. Under load it always has one: a
// workflow task that waited there longer than the sticky timeout (5 s)
// goes back to the workflow queue, which no poll then reached, and its
// session stalled for minutes while the others went on.
func withPollers(o worker.Options) worker.Options {
	scaled := worker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: 2, MinimumNumberOfPollers: 1, MaximumNumberOfPollers: maxPollers,
	}
	o.WorkflowTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(scaled)
	o.ActivityTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(scaled)
	return o
}

// maxPollers bounds the polls a worker keeps open on one queue: each is
// a long poll the server holds, and a saturated server gains nothing
// from more of them (the SDK's own bound is 100).
const maxPollers = 16

// registerWorkflows registers berth's workflows on r, each under its
// berth.<Name> or berth.<pkg>.<Name> (and its legacy names, for the
// executions already running), then extra, by their function names.
func registerWorkflows(r worker.WorkflowRegistry, extra []any) {
	workflows.Register(r)
	agent.Register(r)
	session.Register(r)
	for _, wf := range extra {
		r.RegisterWorkflow(wf)
	}
}

// startModel starts the model activity's worker, when the host serves
// a model, or the one that says none is usable. Each serves the model's
// status too (model.StatusActivityName).
func (w *Worker) startModel(c client.Client, opts Options) error {
	queue := opts.ModelQueue
	if queue == "" {
		queue = opts.Queue + ".model"
	}
	var register func(worker.ActivityRegistry)
	switch {
	case opts.Model != nil:
		m, err := model.New(*opts.Model, opts.Outputs)
		if err != nil {
			// A configuration that cannot work: the host serves its
			// sandboxes all the same, and says why at each call.
			register = noModelRegister(model.NoStatus(*opts.Model, err))
			w.modelStatus = noModelStatus(model.NoStatus(*opts.Model, err))
			break
		}
		register, w.modelStatus = m.Register, m.Status
	case opts.HostQueue == opts.Queue:
		register = noModelRegister(model.NoStatus(model.Config{}, nil))
		w.modelStatus = noModelStatus(model.NoStatus(model.Config{}, nil))
	default:
		return nil // another host may serve it
	}
	if queue == opts.Queue || opts.HostQueue == opts.Queue {
		register(w.generic) // the eager tasks go to the workflow's worker, not to another on its queue
	}
	if queue == opts.Queue {
		return nil
	}
	w.model = worker.New(c, queue, withPollers(worker.Options{}))
	register(w.model)
	if err := w.model.Start(); err != nil {
		w.model = nil
		return fmt.Errorf("hostworker: start worker on %s: %w", queue, err)
	}
	return nil
}

// ModelStatus checks the model the host serves, now; a host that serves
// none says so (model.None).
func (w *Worker) ModelStatus(ctx context.Context) model.Status {
	if w.modelStatus == nil {
		return model.NoStatus(model.Config{}, nil)
	}
	st, _ := w.modelStatus(ctx)
	return st
}

// noModelRegister registers the model activity of a host without a
// usable model: each call fails with st's reason, not retried.
func noModelRegister(st model.Status) func(worker.ActivityRegistry) {
	complete := func(context.Context, chat.Request) (chat.Response, error) {
		return chat.Response{}, temporal.NewNonRetryableApplicationError(st.Reason, string(errdefs.NoModel), nil)
	}
	return func(r worker.ActivityRegistry) {
		r.RegisterActivityWithOptions(complete, activity.RegisterOptions{Name: model.ActivityName})
		model.RegisterStatus(r, noModelStatus(st))
	}
}

func noModelStatus(st model.Status) func(context.Context) (model.Status, error) {
	return func(context.Context) (model.Status, error) { return st, nil }
}

// Stop stops the workers: they take no more work, and the activities
// under way get Options.StopTimeout to finish, all workers at once. The
// leases of the host's sandboxes are renewed until then, and no longer:
// from then on each sandbox stops itself once its lease runs out.
func (w *Worker) Stop() {
	all := append([]worker.Worker{w.generic}, w.providers...)
	for _, x := range []worker.Worker{w.host, w.model} {
		if x != nil {
			all = append(all, x)
		}
	}
	var wg sync.WaitGroup
	for _, x := range all {
		wg.Go(x.Stop)
	}
	wg.Wait()
	if w.stopRenewing != nil {
		w.stopRenewing()
		<-w.renewing
	}
}

// stopCreating stops the workers of the providers' queues, where
// creations come, and refuses every creation from now on (the host's
// queue still serves what the host holds): the host is stopping.
func (w *Worker) stopCreating() {
	w.capacity.Drain()
	var wg sync.WaitGroup
	for _, x := range w.providers {
		wg.Go(x.Stop)
	}
	wg.Wait()
	w.providers = nil
}

// Logger adapts slog for the Temporal SDK.
func Logger(l *slog.Logger) log.Logger { return log.NewStructuredLogger(l) }
