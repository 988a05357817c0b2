package hostworker

import (
	"context"
	"log/slog"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/sandbox"
)

// The fence: a host cut from the Temporal server stops its sandboxes on
// its own before their workflows could take them for lost and make them
// again elsewhere, so that two copies of a sandbox never both run user
// work.
//
// A sandbox's workflow takes it for lost once one of its operations has
// waited its host timeout (sandbox.WithHostTimeout, the label
// activities.LabelHostTimeout) for the host to take it: no sooner than
// a host timeout after the last moment the server could reach the host.
// The host asks the server for its health every fenceProbeEvery; once
// no answer has come for half of a sandbox's host timeout, counted from
// when the last answered probe was sent, it parks the sandbox (notes it
// in its data directory, then pauses it: every process stopped, memory
// and workspace kept), as a stopping host does. Its workflow, if it
// still uses it, resumes it with its next operation (Activities'
// unparking).
//
// Once the server answers again, the host asks the owner of every
// sandbox it holds whether the copy here is still the one it uses
// (activities.OwnersClosed: closed, superseded by a newer incarnation,
// or held on another host): those that are not are destroyed at once,
// without being continued first; those that are and that the fence
// paused are resumed. A host-bound provider that cannot pause is not
// fenced (its copies are destroyed after the partition all the same).
const (
	fenceProbeEvery   = 250 * time.Millisecond
	fenceProbeTimeout = 500 * time.Millisecond
	// fenceCheckTimeout bounds the questions asked of one sandbox's
	// owner and its destruction, after a partition.
	fenceCheckTimeout = 30 * time.Second
)

// fence runs a host's fence (see above).
type fence struct {
	c         client.Client
	acts      *activities.Activities
	providers map[string]provider.Provider
	parked    *activities.Parked
	hostQueue string
	log       *slog.Logger

	// Kept by run's goroutine alone.
	contact time.Time // when the last probe the server answered was sent
	cut     bool      // a sandbox was fenced since: check them all at the next contact
	fenced  map[activities.ParkedRef]bool
}

// run probes the server and fences, until ctx ends.
func (f *fence) run(ctx context.Context) {
	f.contact = time.Now()
	f.fenced = map[activities.ParkedRef]bool{}
	probes := make(chan time.Time, 1)
	go f.probe(ctx, probes)
	tick := time.NewTicker(fenceProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case sent := <-probes:
			f.contact = sent
			if f.cut {
				f.heal(ctx)
			}
		case <-tick.C:
			f.fenceDue(ctx)
		}
	}
}

// probe asks the server for its health every fenceProbeEvery, and sends
// on answered the time each answered probe was sent.
func (f *fence) probe(ctx context.Context, answered chan time.Time) {
	tick := time.NewTicker(fenceProbeEvery)
	defer tick.Stop()
	for {
		sent := time.Now()
		pctx, cancel := context.WithTimeout(ctx, fenceProbeTimeout)
		_, err := f.c.CheckHealth(pctx, &client.CheckHealthRequest{})
		cancel()
		if err == nil {
			select {
			case <-answered: // the older answer is superseded
			default:
			}
			answered <- sent
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// fenceDue parks every running sandbox of the host-bound providers cut
// off from the server for half of its host timeout.
func (f *fence) fenceDue(ctx context.Context) {
	cut := time.Since(f.contact)
	if cut < sandbox.MinHostTimeout/2 {
		return
	}
	for name, p := range f.providers {
		if caps := p.Capabilities(); !caps.HostBound || !caps.Pause {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, fenceCheckTimeout)
		infos, err := p.List(lctx, nil)
		cancel()
		if err != nil {
			f.log.Warn("fence: cannot list sandboxes", "provider", name, "error", err)
			continue
		}
		for _, info := range infos {
			r := activities.ParkedRef{Provider: name, ID: info.ID}
			if info.State != provider.StateRunning || f.fenced[r] {
				continue
			}
			if cut < activities.HostTimeoutOf(info.Labels, sandbox.DefaultHostTimeout)/2 {
				continue
			}
			f.cut = true
			// Noted as parked first, so that its workflow's next
			// operation, if it still uses it, resumes it.
			pctx, cancel := context.WithTimeout(ctx, fenceCheckTimeout)
			err := f.parked.Park(r, func() error { return pauseOne(pctx, p, info.ID) })
			cancel()
			if err != nil {
				f.log.Error("fence: cannot park a sandbox; it may run on", "sandbox", info.ID, "error", err)
				continue
			}
			f.fenced[r] = true
			f.log.Warn("fence: cut from the server for half the sandbox's host timeout: paused it, before its workflow could take it for lost",
				"sandbox", info.ID, "workflow", info.Labels[sandbox.LabelWorkflowID], "cut", cut.Round(time.Millisecond))
		}
	}
}

// heal, at the first contact after a fence, destroys every copy the
// host holds that its owner no longer uses, and resumes those fenced
// that it does. A sandbox whose owner cannot be asked now is asked again
// at the next probe.
func (f *fence) heal(ctx context.Context) {
	again := false
	for name, p := range f.providers {
		if !p.Capabilities().HostBound {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, fenceCheckTimeout)
		infos, err := p.List(lctx, nil)
		cancel()
		if err != nil {
			f.log.Warn("fence: cannot list sandboxes", "provider", name, "error", err)
			again = true
			continue
		}
		for _, info := range infos {
			if !f.check(ctx, name, info) {
				again = true
			}
		}
	}
	if !again {
		f.cut = false
		clear(f.fenced)
	}
}

// check settles one sandbox after a partition, and says whether it did.
func (f *fence) check(ctx context.Context, name string, info provider.Info) bool {
	ctx, cancel := context.WithTimeout(ctx, fenceCheckTimeout)
	defer cancel()
	r := activities.ParkedRef{Provider: name, ID: info.ID}
	fenced := f.fenced[r]
	wf := info.Labels[sandbox.LabelWorkflowID]
	if wf == "" {
		return true // not a workflow's: the reaper's by its lifetime
	}
	gone, err := f.acts.OwnersClosed(ctx, []activities.Owner{{
		WorkflowID: wf, RunID: info.Labels[sandbox.LabelRunID],
		Sandbox: info.ID, Base: info.Labels[sandbox.LabelSandbox], Provider: name,
	}})
	if err != nil {
		f.log.Warn("fence: cannot ask a sandbox's owner about it; asking again", "sandbox", info.ID, "workflow", wf, "error", err)
		return false
	}
	if gone[0] {
		if err := f.acts.Destroy(ctx, refs.Sandbox{Provider: name, ID: info.ID, Queue: f.hostQueue}); err != nil {
			f.log.Warn("fence: cannot destroy a superseded copy; trying again", "sandbox", info.ID, "error", err)
			return false
		}
		delete(f.fenced, r)
		f.log.Info("fence: destroyed a copy its workflow no longer uses", "sandbox", info.ID, "workflow", wf, "fenced", fenced)
		return true
	}
	if !fenced {
		return true // not ours to resume
	}
	// Not parked any more: resumed by an operation, or paused by its
	// workflow, which Unpark waits for rather than undoes.
	resumed, err := f.parked.Unpark(r, func() error { return resumeOne(ctx, f.providers[name], info.ID) })
	if err != nil {
		f.log.Warn("fence: cannot resume a sandbox; its next operation will", "sandbox", info.ID, "error", err)
		return true
	}
	delete(f.fenced, r)
	if resumed {
		f.log.Info("fence: back in contact: resumed a sandbox its workflow still uses", "sandbox", info.ID, "workflow", wf)
	}
	return true
}

func resumeOne(ctx context.Context, p provider.Provider, id string) error {
	sb, err := p.Get(ctx, id)
	if err != nil {
		return err
	}
	if pa, ok := sb.(provider.Pauser); ok {
		return pa.Resume(ctx)
	}
	return nil
}

func fenceLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return l.With("component", "fence")
}
