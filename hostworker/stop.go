package hostworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// DefaultStopTimeout is how long a stopping host lets the commands under
// way finish before it pauses their sandboxes.
const DefaultStopTimeout = 10 * time.Second

// ParkedFile, in the data directory, names the sandboxes a host paused
// as it stopped.
const ParkedFile = "parked"

func stopTimeout(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultStopTimeout
	case d < 0:
		return 0
	}
	return d
}

// Shutdown stops the host as SIGTERM asks, in three steps.
//
// Draining: the host takes no new sandbox (its providers' queues are no
// longer polled, and it refuses creations sent to it: placement skips
// it), and asks the workflow of each sandbox of its host-bound providers
// to hibernate it once it is idle (activities.UpdateDrain): checkpointed
// and destroyed, it wakes on another host at its next operation. The
// sandboxes hibernate side by side; the host waits for them up to
// HostConfig.StopTimeout. A provider that no other host serves (berth
// dev, a deployment of one host) is not drained: its sandboxes would
// wake here again, their processes lost, and parking keeps them.
//
// Stopping: its workers stop taking work and give the activities under
// way (the commands running) up to HostConfig.StopTimeout to finish; a
// command that runs longer goes on in its sandbox, and a later attempt of
// its activity attaches to it.
//
// Parking: every sandbox of the host's host-bound providers still running
// (busy while it drained, or whose workflow could not hibernate it) is
// paused, so that none runs unwatched while no worker serves it: the
// host notes it in its data directory first (ParkedFile), and the next
// operation on it, once the host is back, resumes it. Sandboxes of other
// providers are any worker's, and go on. Shutdown then closes the host,
// and returns the sandboxes it paused.
func (h *Host) Shutdown(ctx context.Context) ([]activities.ParkedRef, error) {
	h.stop()
	if !h.stopped {
		h.drain(ctx)
		h.Stop()
		h.stopped = true
	}
	defer h.Close()
	return h.park(ctx)
}

// drainAtOnce bounds how many sandboxes a draining host asks to
// hibernate at the same time.
const drainAtOnce = 16

// drain stops the host taking new sandboxes and has the workflows of its
// idle ones hibernate them, waiting up to h.drainFor; it returns those
// hibernated.
func (h *Host) drain(ctx context.Context) []string {
	h.stopCreating()
	deadline := time.Now().Add(h.drainFor)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var (
		mu         sync.Mutex
		hibernated []string
		wg         sync.WaitGroup
		slots      = make(chan struct{}, drainAtOnce)
	)
	for _, p := range h.providers {
		if !p.Capabilities().HostBound || !h.othersServe(ctx, p.Name()) {
			continue
		}
		infos, err := p.List(ctx, nil)
		if err != nil {
			h.log.Warn("drain: cannot list sandboxes", "provider", p.Name(), "error", err)
			continue
		}
		for _, info := range infos {
			wf := info.Labels[sandbox.LabelWorkflowID]
			if wf == "" || info.State == provider.StateLost {
				continue
			}
			base := info.Labels[sandbox.LabelSandbox]
			if base == "" {
				base, _ = activities.Base(info.ID)
			}
			wg.Go(func() {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
				defer func() { <-slots }()
				r, err := h.drainOne(ctx, wf, base, info.ID, deadline)
				if err != nil || !r.Hibernated {
					reason := r.Reason
					if err != nil {
						reason = err.Error()
					}
					h.log.Info("drain: sandbox stays", "sandbox", info.ID, "workflow", wf, "reason", reason)
					return
				}
				mu.Lock()
				hibernated = append(hibernated, info.ID)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	slices.Sort(hibernated)
	h.log.Info("drained: idle sandboxes hibernated, to wake on another host", "hibernated", hibernated)
	return hibernated
}

// othersServe says whether another host serves provider name, or did
// lately: without one, the sandboxes would only wake here again, with
// their processes gone, and they are better paused (parked), their
// processes kept, until the host is back.
func (h *Host) othersServe(ctx context.Context, name string) bool {
	if h.HostQueue == h.queue {
		return false // one host serves everything (berth dev)
	}
	hosts, err := activities.PollingHosts(ctx, h.client, activities.ProviderQueue(h.queue, name))
	if err != nil {
		h.log.Warn("drain: cannot tell which hosts serve a provider; its sandboxes stay", "provider", name, "error", err)
		return false
	}
	for _, q := range hosts {
		if q != h.HostQueue {
			return true
		}
	}
	h.log.Info("drain: no other host serves the provider; its sandboxes stay, paused", "provider", name)
	return false
}

// drainOne asks the workflow wf to hibernate its sandbox id, of base
// base, if it is idle.
func (h *Host) drainOne(ctx context.Context, wf, base, id string, deadline time.Time) (activities.DrainResult, error) {
	var r activities.DrainResult
	// The workflow waits for the commands under way up to the deadline,
	// less a margin to hibernate the sandbox in.
	wait := max(time.Until(deadline)-time.Until(deadline)/4, 0)
	u, err := h.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: wf, UpdateName: activities.UpdateDrain + base, Args: []any{activities.DrainInput{ID: id, Wait: wait}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = u.Get(ctx, &r)
	}
	return r, err
}

// park pauses the running sandboxes of the host-bound providers,
// writing them down first.
func (h *Host) park(ctx context.Context) ([]activities.ParkedRef, error) {
	type running struct {
		ref activities.ParkedRef
		p   provider.Provider
	}
	var all []running
	var errs []error
	for _, p := range h.providers {
		if caps := p.Capabilities(); !caps.HostBound || !caps.Pause {
			continue
		}
		infos, err := p.List(ctx, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s sandboxes: %w", p.Name(), err))
			continue
		}
		for _, info := range infos {
			if info.State == provider.StateRunning {
				all = append(all, running{activities.ParkedRef{Provider: p.Name(), ID: info.ID}, p})
			}
		}
	}
	refs := make([]activities.ParkedRef, len(all))
	for i, r := range all {
		refs[i] = r.ref
	}
	if len(refs) == 0 {
		return nil, errors.Join(errs...)
	}
	if err := h.parked.Add(refs...); err != nil {
		// Unnoted, a paused sandbox would stay frozen under a workflow
		// that believes it running: leave them all running.
		return nil, err
	}
	var paused []activities.ParkedRef
	for _, r := range all {
		// Park notes it again (noted already, it writes nothing) and
		// pauses it in turn with any operation of its workflow.
		err := h.parked.Park(r.ref, func() error { return pauseOne(ctx, r.p, r.ref.ID) })
		if err != nil {
			errs = append(errs, fmt.Errorf("pause %s sandbox %s: %w", r.ref.Provider, r.ref.ID, err))
			continue
		}
		paused = append(paused, r.ref)
	}
	return paused, errors.Join(errs...)
}

func pauseOne(ctx context.Context, p provider.Provider, id string) error {
	sb, err := p.Get(ctx, id)
	if err != nil {
		return err
	}
	pa, ok := sb.(provider.Pauser)
	if !ok {
		return errdefs.ErrUnsupported
	}
	return pa.Pause(ctx)
}

// reconcileAtStart lists what the host holds on each provider, forgets
// the parked sandboxes that are gone, and says in one line what it found.
func (h *Host) reconcileAtStart(ctx context.Context) error {
	held := map[activities.ParkedRef]bool{}
	attrs := []any{}
	for _, p := range h.providers {
		infos, err := p.List(ctx, nil)
		if err != nil {
			h.log.Warn("cannot list sandboxes", "provider", p.Name(), "error", err)
			continue
		}
		for _, info := range infos {
			held[activities.ParkedRef{Provider: p.Name(), ID: info.ID}] = true
		}
		attrs = append(attrs, p.Name(), len(infos))
	}
	parked, err := h.parked.Retain(func(r activities.ParkedRef) bool { return held[r] })
	if err != nil {
		return err
	}
	ids := make([]string, len(parked))
	for i, r := range parked {
		ids[i] = r.ID
	}
	slices.Sort(ids)
	h.log.Info("sandboxes on this host", append(attrs, "parked", ids)...)
	return nil
}
