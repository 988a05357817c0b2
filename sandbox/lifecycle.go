package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// The lifecycle is a state machine kept in workflow state:
//
//	running --idle--> paused --longer idle--> hibernated
//	   ^                 |                        |
//	   +---- operation --+------ operation -------+
//	lost --operation (Reprovision)--> running
//
// Transitions (pause, resume, hibernate, wake, recover, checkpoint,
// switch) run one at a time and mark the handle busy; an operation that
// arrives meanwhile waits for the transition to end, then resumes the
// sandbox if it has to. Nothing is lost and nothing races, because
// workflow coroutines only yield at blocking calls and every check and
// change of state happens between two of them.

// do runs one operation on the sandbox. what describes a mutating
// operation (for the list of what a recovery loses); it is empty for
// reads.
func (s *Sandbox) do(ctx workflow.Context, what string, op func(refs.Sandbox) error) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	ref := s.st.Ref
	err := op(ref)
	s.st.inflight--
	s.st.LastActive = workflow.Now(ctx)
	s.st.epoch++
	if errors.Is(err, errdefs.ErrSandboxLost) && s.st.Ref == ref {
		return s.lost(ctx, err)
	}
	if what != "" {
		if len(s.st.Since) == 0 {
			s.st.ChangedAt = s.st.LastActive
		}
		if len(s.st.Since) < maxSince {
			s.st.Since = append(s.st.Since, what)
		} else {
			s.st.SinceMore++
		}
		if n := s.st.Config.CheckpointEvery; n > 0 && len(s.st.Since)+s.st.SinceMore >= n {
			if cerr := s.transition(ctx, s.checkpoint); cerr != nil {
				workflow.GetLogger(ctx).Warn("checkpoint failed", "sandbox", ref.ID, "error", cerr)
			}
		}
	}
	return err
}

// maxSince bounds the operations since the last checkpoint that the
// handle names (state.Since): the list is workflow state, carried across
// continue-as-new, and a sandbox never checkpointed runs commands for
// its whole life.
const maxSince = 32

// sinceLost names the operations since the checkpoint, for a LostError.
func (s *Sandbox) sinceLost() []string {
	lost := s.st.Since
	if s.st.SinceMore > 0 {
		lost = append(slices.Clone(lost), fmt.Sprintf("%d more", s.st.SinceMore))
	}
	return lost
}

// noteGone notes whether err, which found the sandbox lost, says its
// host took no operation in time; a nil err (the sandbox was found lost
// before) changes nothing.
func (s *Sandbox) noteGone(err error) {
	if err == nil {
		return
	}
	s.st.GoneHost = ""
	var gone *hostGoneError
	if errors.As(err, &gone) {
		s.st.GoneHost = gone.queue
	}
}

// begin waits for any transition in flight and brings the sandbox back
// to running, then counts the operation as in flight.
func (s *Sandbox) begin(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return !s.st.busy }); err != nil {
		return err
	}
	switch s.st.State {
	case StateStopped:
		return fmt.Errorf("%w: sandbox %s is stopped", errdefs.ErrNotFound, s.name())
	case StatePaused, StateHibernated:
		if s.st.Config.NoAutoResume {
			return fmt.Errorf("%w: sandbox %s is %s and automatic resume is off", errdefs.ErrSandboxPaused, s.name(), s.st.State)
		}
		if err := s.transition(ctx, s.resume); err != nil {
			if errors.Is(err, errdefs.ErrSandboxLost) {
				return s.lost(ctx, err)
			}
			return fmt.Errorf("resume sandbox %s: %w", s.name(), err)
		}
	case StateLost:
		return s.lost(ctx, nil)
	}
	// Another transition may have started while this one ran.
	if s.st.busy || s.st.State != StateRunning {
		return s.begin(ctx)
	}
	s.st.inflight++
	return nil
}

// name names the sandbox in errors: its id, or, before its first wake
// (StartHibernated), the id it will have.
func (s *Sandbox) name() string {
	if s.st.Ref.ID == "" {
		return s.st.Base
	}
	return s.st.Ref.ID
}

// transition runs one state change with the handle marked busy.
func (s *Sandbox) transition(ctx workflow.Context, change func(workflow.Context) error) error {
	if err := workflow.Await(ctx, func() bool { return !s.st.busy }); err != nil {
		return err
	}
	s.st.busy = true
	defer func() { s.st.busy = false; s.st.epoch++ }()
	return change(ctx)
}

// set moves the sandbox to state st, counting the time it was held:
// running or paused, a sandbox exists and takes room on its host.
func (s *Sandbox) set(ctx workflow.Context, st State) {
	now := workflow.Now(ctx)
	held := func(st State) bool { return st == StateRunning || st == StatePaused }
	switch {
	case held(st) && s.st.HeldSince.IsZero():
		s.st.HeldSince = now
	case !held(st) && !s.st.HeldSince.IsZero():
		s.st.Held += now.Sub(s.st.HeldSince)
		s.st.HeldSince = time.Time{}
	}
	s.st.State = st
	s.st.epoch++
}

// commandStarted and commandEnded count the time commands run: while at
// least one does, the sandbox is active.
func (s *Sandbox) commandStarted(ctx workflow.Context) {
	if s.st.running == 0 {
		s.st.ActiveSince = workflow.Now(ctx)
	}
	s.st.running++
}

func (s *Sandbox) commandEnded(ctx workflow.Context) {
	if s.st.running--; s.st.running == 0 {
		s.st.Active += workflow.Now(ctx).Sub(s.st.ActiveSince)
		s.st.ActiveSince = time.Time{}
	}
}

// Pause freezes the sandbox now, natively where the provider can, and
// hibernates it elsewhere. The next operation resumes it.
func (s *Sandbox) Pause(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return !s.st.busy && s.st.inflight == 0 }); err != nil {
		return err
	}
	if s.st.State != StateRunning {
		return nil
	}
	return s.transition(ctx, s.pause)
}

// Resume brings a paused or hibernated sandbox back to running. Other
// operations do it themselves unless DisableAutoResume was given.
func (s *Sandbox) Resume(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return !s.st.busy }); err != nil {
		return err
	}
	switch s.st.State {
	case StatePaused, StateHibernated:
		return s.transition(ctx, s.resume)
	case StateLost:
		return s.lost(ctx, nil)
	}
	return nil
}

// Hibernate checkpoints the sandbox and destroys it now. The next
// operation re-creates it from the checkpoint; its processes are gone.
func (s *Sandbox) Hibernate(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return !s.st.busy && s.st.inflight == 0 }); err != nil {
		return err
	}
	if s.st.State != StateRunning && s.st.State != StatePaused {
		return nil
	}
	return s.transition(ctx, s.hibernate)
}

func (s *Sandbox) pause(ctx workflow.Context) error {
	_, err := call[struct{}](ctx, s.opts(s.st.Ref.Queue, 0), acts.Pause, s.st.Ref)
	if errors.Is(err, errdefs.ErrUnsupported) {
		return s.hibernate(ctx)
	}
	if err != nil {
		return s.markLost(ctx, err)
	}
	s.set(ctx, StatePaused)
	return nil
}

func (s *Sandbox) resume(ctx workflow.Context) error {
	if s.st.State == StateHibernated {
		return s.wake(ctx)
	}
	_, err := call[struct{}](ctx, s.opts(s.st.Ref.Queue, 0), acts.Resume, s.st.Ref)
	if err != nil {
		return s.markLost(ctx, err)
	}
	s.set(ctx, StateRunning)
	return nil
}

// hibernate checkpoints the sandbox and destroys it. A sandbox that
// cannot be checkpointed stays as it was.
func (s *Sandbox) hibernate(ctx workflow.Context) error {
	if s.st.State == StatePaused {
		// The workspace is read through the sandbox's daemon, frozen
		// with it.
		if err := s.resume(ctx); err != nil {
			return err
		}
	}
	if s.st.Ref.Hibernate && workflow.GetVersion(ctx, nativeHibernateVersion, workflow.DefaultVersion, 1) == 1 {
		return s.hibernateNative(ctx)
	}
	if err := s.checkpoint(ctx); err != nil {
		return s.markLost(ctx, err)
	}
	s.destroy(ctx, s.st.Ref)
	s.set(ctx, StateHibernated)
	return nil
}

// nativeHibernateVersion marks the histories in which a sandbox whose
// provider keeps filesystems itself (refs.Sandbox.Hibernate) is
// hibernated so too.
const nativeHibernateVersion = "native-hibernation"

// hibernateNative hibernates a sandbox whose provider can keep its
// whole filesystem (Modal's snapshot): that, and berth's checkpoint of
// the workspace besides, taken at once, before the sandbox is
// destroyed.
//
// The checkpoint is always taken, not only when the native snapshot
// fails: the snapshot can fail later still, when the sandbox is gone
// and nothing else could be read from it (it expires while the sandbox
// sleeps, the service drops it, the wake from it fails), and only a
// checkpoint taken before the destroy can serve then. Taken at the same
// time, the two cost the longer of them, not their sum; the native one
// buys a wake that is one creation, with the whole filesystem (what was
// installed outside the workspace too). If the checkpoint fails the
// sandbox stays as it was, as without native hibernation.
//
// Retries are safe: the native activity is keyed by the hibernation's
// number (a retry returns the snapshot the first attempt took), and the
// sandbox is destroyed only once both results are in history. A worker
// that dies in between leaves the sandbox running, whole, for the
// retried activities.
func (s *Sandbox) hibernateNative(ctx workflow.Context) error {
	s.st.Hibernations++
	ref := s.st.Ref
	o := s.hibernateOpts(ref.Queue)
	native := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), acts.Hibernate,
		activities.HibernateInput{Sandbox: ref, ID: fmt.Sprintf("h%d", s.st.Hibernations)})
	cerr := s.checkpoint(ctx)
	h, nerr := result[provider.Hibernation](ctx, native, o.TaskQueue)
	if cerr != nil {
		if nerr == nil {
			s.discardNative(ctx, ref, h)
		}
		return s.markLost(ctx, cerr)
	}
	if nerr != nil {
		workflow.GetLogger(ctx).Warn("native hibernation failed; the checkpoint serves", "sandbox", ref.ID, "error", nerr)
	} else {
		s.st.Native = &h
	}
	s.destroy(ctx, ref)
	s.set(ctx, StateHibernated)
	return nil
}

// nativeWakeMargin: a native snapshot that expires sooner than this is
// not woken from, so that it cannot expire while the sandbox is made.
const nativeWakeMargin = 5 * time.Minute

// wake re-creates a hibernated sandbox: from its native snapshot when
// it has one that has not expired, else, or when that wake fails, from
// its checkpoint. The fallback makes the sandbox of the same id, so
// that one an attempt of the native wake made is found and filled, not
// left behind.
func (s *Sandbox) wake(ctx workflow.Context) error {
	id := s.nextID()
	if n := s.st.Native; n != nil {
		old := s.st.Ref
		if workflow.Now(ctx).Before(n.ExpiresAt.Add(-nativeWakeMargin)) {
			ref, err := s.wakeNative(ctx, id, *n)
			if err == nil {
				s.st.Ref, s.st.Native = ref, nil
				// The workspace is the checkpoint's, but nothing says
				// which of its files changed since: the next snapshot
				// reads them all.
				s.st.RestoredFrom, s.st.RestoredAt = "", time.Time{}
				s.set(ctx, StateRunning)
				s.leaveNative(ctx, old, *n)
				return nil
			}
			workflow.GetLogger(ctx).Warn("native wake failed; waking from the checkpoint", "sandbox", id, "error", err)
		}
		ref, err := s.provision(ctx, s.st.Config.Provider, id)
		if err != nil {
			return err
		}
		s.st.Ref, s.st.Native = ref, nil
		s.set(ctx, StateRunning)
		s.leaveNative(ctx, old, *n)
		return nil
	}
	ref, err := s.provision(ctx, s.st.Config.Provider, id)
	if err != nil {
		return err
	}
	s.st.Ref = ref
	s.set(ctx, StateRunning)
	return nil
}

// wakeNative makes sandbox id from native snapshot h.
func (s *Sandbox) wakeNative(ctx workflow.Context, id string, h provider.Hibernation) (refs.Sandbox, error) {
	spec := s.st.Config.Spec
	spec.ID = id
	queue, err := s.createQueue(ctx, s.st.Config.Provider)
	if err != nil {
		return refs.Sandbox{}, err
	}
	// As a creation, it runs to its end, so that what it made is known.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	o := s.lifecycle(queue)
	o.RetryPolicy = nativeRetry()
	ref, err := call[refs.Sandbox](dctx, o, acts.Wake, activities.WakeInput{Provider: s.st.Config.Provider, Spec: spec, From: h})
	if err == nil && ctx.Err() != nil {
		s.destroy(dctx, ref)
		return ref, temporal.NewCanceledError("canceled while the sandbox was being woken")
	}
	return ref, err
}

// leaveNative drops native snapshot h, of sandbox ref, once the
// sandbox no longer needs it, without making the caller wait; a failure
// leaves it to its expiry.
func (s *Sandbox) leaveNative(ctx workflow.Context, ref refs.Sandbox, h provider.Hibernation) {
	s.st.behind++
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(ctx workflow.Context) {
		defer func() { s.st.behind-- }()
		s.discardNative(ctx, ref, h)
	})
}

// discardNative drops native snapshot h of sandbox ref; a failure
// leaves it to its expiry.
func (s *Sandbox) discardNative(ctx workflow.Context, ref refs.Sandbox, h provider.Hibernation) {
	_, err := call[struct{}](ctx, s.opts(ref.Queue, 0), acts.DiscardHibernation, activities.DiscardInput{Provider: ref.Provider, From: h})
	if err != nil {
		workflow.GetLogger(ctx).Warn("discard native snapshot", "snapshot", h.Ref, "error", err)
	}
}

// dropNative discards the native snapshot of a hibernated sandbox, as
// it stops.
func (s *Sandbox) dropNative(ctx workflow.Context) {
	if n := s.st.Native; n != nil {
		s.discardNative(ctx, s.st.Ref, *n)
		s.st.Native = nil
	}
}

// markLost notes that err revealed the sandbox lost and returns err.
func (s *Sandbox) markLost(ctx workflow.Context, err error) error {
	if errors.Is(err, errdefs.ErrSandboxLost) {
		s.noteGone(err)
		s.set(ctx, StateLost)
	}
	return err
}

// lost handles a sandbox found lost: under Reprovision it is re-created
// from its last checkpoint. Either way the operation that found it gets
// a LostError saying what was lost.
func (s *Sandbox) lost(ctx workflow.Context, cause error) error {
	s.noteGone(cause)
	s.set(ctx, StateLost)
	e := &LostError{Sandbox: s.name(), Checkpoint: s.st.Checkpoint, Lost: s.sinceLost(), Err: cause}
	var gone *hostGoneError
	e.NotStarted = errors.As(cause, &gone) && gone.notStarted
	if s.st.Config.Recovery == Fail {
		return e
	}
	err := s.transition(ctx, func(ctx workflow.Context) error {
		old := s.st.Ref
		ref, err := s.provision(ctx, s.st.Config.Provider, s.nextID())
		if err != nil {
			return err
		}
		s.st.Ref, s.st.Since, s.st.SinceMore, s.st.ChangedAt, s.st.GoneHost = ref, nil, 0, time.Time{}, ""
		s.set(ctx, StateRunning)
		// The lost sandbox may still hold records, or come back.
		workflow.Go(ctx, func(ctx workflow.Context) { s.destroy(ctx, old) })
		return nil
	})
	if err != nil {
		e.Err = errors.Join(cause, fmt.Errorf("recover: %w", err))
		return e
	}
	e.Recovered = true
	return e
}

// nextID names the sandbox's next incarnation.
func (s *Sandbox) nextID() string {
	s.st.Generation++
	return incarnation(s.st.Base, s.st.Generation)
}

// checkpoint snapshots the workspace as the handle's new checkpoint and
// drops the one it replaces.
func (s *Sandbox) checkpoint(ctx workflow.Context) error {
	info, err := s.snapshot(ctx, SnapshotCheckpoint)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	s.dropCheckpoint(ctx)
	s.st.Checkpoint, s.st.OwnCheckpoint, s.st.Since, s.st.SinceMore, s.st.ChangedAt = info.ID, true, nil, 0, time.Time{}
	return nil
}

func (s *Sandbox) snapshot(ctx workflow.Context, kind string) (activities.SnapshotInfo, error) {
	return s.snapshotFor(ctx, kind, "")
}

// snapshotFor snapshots the workspace, labelled as owned by workflow
// owner, or by the sandbox's owner when owner is empty.
func (s *Sandbox) snapshotFor(ctx workflow.Context, kind, owner string) (activities.SnapshotInfo, error) {
	labels := map[string]string{LabelSandbox: s.st.Base}
	if owner == "" {
		labels[LabelWorkflowID] = s.st.Config.Spec.Labels[LabelWorkflowID]
		labels[LabelRunID] = s.st.Config.Spec.Labels[LabelRunID]
	} else {
		labels[LabelWorkflowID] = owner
	}
	// The checkpoint holds most of what the workspace holds: its chunks
	// are not stored again, and when the sandbox was restored from it,
	// what did not change since is not even read.
	parent := s.st.Checkpoint
	var restoredAt time.Time
	if parent != "" && parent == s.st.RestoredFrom {
		restoredAt = s.st.RestoredAt
	}
	s.st.Snapshots++
	id := fmt.Sprintf("%s-s%d", s.st.Base, s.st.Snapshots)
	return call[activities.SnapshotInfo](ctx, s.transfer(s.st.Ref.Queue), acts.Snapshot,
		activities.SnapshotInput{Sandbox: s.st.Ref, ID: id, Kind: kind, Parent: parent, Labels: labels, RestoredAt: restoredAt})
}

// dropCheckpoint deletes the handle's own checkpoint, if it has one; a
// failure leaves it to the reaper.
func (s *Sandbox) dropCheckpoint(ctx workflow.Context) {
	if !s.st.OwnCheckpoint || s.st.Checkpoint == "" {
		return
	}
	_, err := call[struct{}](ctx, s.opts(s.st.Config.Queue, 0), acts.DeleteSnapshot, s.st.Checkpoint)
	if err != nil {
		workflow.GetLogger(ctx).Warn("delete checkpoint", "snapshot", s.st.Checkpoint, "error", err)
	}
	s.st.Checkpoint, s.st.OwnCheckpoint = "", false
}

// destroy destroys a sandbox the handle is done with; a failure leaves it
// to the reaper.
func (s *Sandbox) destroy(ctx workflow.Context, ref refs.Sandbox) {
	_, err := call[struct{}](ctx, s.lifecycle(ref.Queue), acts.Destroy, ref)
	if err != nil && !errors.Is(err, errdefs.ErrSandboxLost) {
		workflow.GetLogger(ctx).Warn("destroy sandbox", "sandbox", ref.ID, "error", err)
	}
}

// watchIdle pauses the sandbox when it has been idle long enough, and
// hibernates it when it has been idle longer. It sleeps on one timer per
// idle period, not one per operation, to keep history small.
func (s *Sandbox) watchIdle(ctx workflow.Context) {
	for s.st.State != StateStopped && !s.detached {
		action, at := s.nextIdleStep()
		if action == nil {
			epoch := s.st.epoch
			if workflow.Await(ctx, func() bool { return s.st.epoch != epoch }) != nil {
				return
			}
			continue
		}
		if wait := at.Sub(workflow.Now(ctx)); wait > 0 {
			if workflow.Sleep(ctx, wait) != nil {
				return
			}
			continue // operations may have come meanwhile
		}
		if s.st.busy || s.st.inflight > 0 {
			if workflow.Await(ctx, func() bool { return !s.st.busy && s.st.inflight == 0 }) != nil {
				return
			}
			continue
		}
		if err := s.transition(ctx, action); err != nil {
			workflow.GetLogger(ctx).Warn("idle sandbox", "sandbox", s.st.Ref.ID, "error", err)
			// Try again only after the next operation.
			epoch := s.st.epoch
			if workflow.Await(ctx, func() bool { return s.st.epoch != epoch }) != nil {
				return
			}
		}
	}
}

// nextIdleStep says what the idle watcher does next, and when.
func (s *Sandbox) nextIdleStep() (func(workflow.Context) error, time.Time) {
	idle, hib := s.st.Config.IdleTimeout, s.st.Config.HibernateAfter
	var step func(workflow.Context) error
	var at time.Time
	switch s.st.State {
	case StateRunning:
		if idle > 0 && (hib <= 0 || idle < hib) {
			step, at = s.pause, s.st.LastActive.Add(idle)
		} else if hib > 0 {
			step, at = s.hibernate, s.st.LastActive.Add(hib)
		}
		// A checkpoint due at the same time as the pause or later is
		// taken first: a paused sandbox's workspace cannot be read.
		if due, ok := s.checkpointDue(); ok && (step == nil || !due.After(at)) {
			return s.checkpoint, due
		} else if ok && s.st.Config.CheckpointIdle > 0 && step != nil {
			return s.checkpoint, at
		}
	case StatePaused:
		if hib > 0 {
			step, at = s.hibernate, s.st.LastActive.Add(hib)
		}
	}
	return step, at
}

// checkpointDue says when the checkpoint policy's time rules next want
// a checkpoint of a running sandbox; ok is false when none is due (no
// rule, or nothing changed since the last checkpoint).
func (s *Sandbox) checkpointDue() (due time.Time, ok bool) {
	if len(s.st.Since) == 0 {
		return time.Time{}, false
	}
	if d := s.st.Config.CheckpointInterval; d > 0 {
		due, ok = s.st.ChangedAt.Add(d), true
	}
	if d := s.st.Config.CheckpointIdle; d > 0 {
		if t := s.st.LastActive.Add(d); !ok || t.Before(due) {
			due, ok = t, true
		}
	}
	return due, ok
}
