package sandbox

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// A hosted service may end its sandboxes after a hard limit of its own
// (Amazon Bedrock AgentCore's sessions after 8 hours, Modal's after 24),
// shorter than a berth sandbox's lifetime. The Create activity says so
// in the sandbox's reference (refs.Sandbox.MaxLifetime), and the handle
// carries the workspace across that end: some time before it, once no
// operation is under way, a running sandbox moves to a new one on the
// same provider and image, as Switch moves it to another, and a paused
// one is hibernated (the next operation wakes it on a new sandbox). The
// workspace's files move; processes do not, as on any switch. A command
// still running at the end is lost with its sandbox, and the next
// operation finds the sandbox lost and recovers it from the checkpoint
// the move took.

// renewMargin bounds how long before its end a sandbox is moved.
const renewMargin = 10 * time.Minute

// renewRetry is how long the handle waits before it tries again a move
// that failed (no worker, the service refused the new sandbox).
const renewRetry = time.Minute

// renewAfter is how long after it was made to move a sandbox whose
// service ends it after limit: a quarter of limit, at most renewMargin,
// before the end. The workflow's clock counts it from when the handle
// got the sandbox's reference, just after its creation: the service
// counts from a little earlier, which the margin covers, and neither
// clock is compared with the other's.
func renewAfter(limit time.Duration) time.Duration {
	return limit - min(renewMargin, limit/4)
}

// watchExpiry moves the sandbox before its service ends it. It makes no
// timer for a sandbox whose reference has no MaxLifetime, which is
// every sandbox of a provider with no hard limit.
func (s *Sandbox) watchExpiry(ctx workflow.Context) {
	for s.st.State != StateStopped && !s.detached {
		ref := s.st.Ref
		if ref.MaxLifetime <= 0 || (s.st.State != StateRunning && s.st.State != StatePaused) {
			epoch := s.st.epoch
			if workflow.Await(ctx, func() bool { return s.st.epoch != epoch }) != nil {
				return
			}
			continue
		}
		if s.st.RenewFor != ref.ID {
			// Kept in state, so that it holds across continue-as-new.
			s.st.RenewFor, s.st.RenewAt = ref.ID, workflow.Now(ctx).Add(renewAfter(ref.MaxLifetime))
		}
		id := ref.ID
		if wait := s.st.RenewAt.Sub(workflow.Now(ctx)); wait > 0 {
			moved := func() bool { return s.st.Ref.ID != id || s.st.State == StateStopped }
			if _, err := workflow.AwaitWithTimeout(ctx, wait, moved); err != nil {
				return
			}
			continue
		}
		if s.st.busy || s.st.inflight > 0 {
			if workflow.Await(ctx, func() bool { return !s.st.busy && s.st.inflight == 0 }) != nil {
				return
			}
			continue // the sandbox may have moved, or stopped, meanwhile
		}
		if err := s.transition(ctx, s.renew); err != nil {
			workflow.GetLogger(ctx).Warn("move the sandbox before its service ends it", "sandbox", ref.ID,
				"max_lifetime", ref.MaxLifetime, "error", err)
			// Tried again a minute later while the sandbox may still be
			// there; after its end, the next operation finds it lost.
			end := s.st.RenewAt.Add(ref.MaxLifetime - renewAfter(ref.MaxLifetime))
			if workflow.Now(ctx).Before(end) {
				moved := func() bool { return s.st.Ref.ID != id || s.st.State == StateStopped }
				if _, err := workflow.AwaitWithTimeout(ctx, renewRetry, moved); err != nil {
					return
				}
				continue
			}
			epoch := s.st.epoch
			if workflow.Await(ctx, func() bool { return s.st.epoch != epoch }) != nil {
				return
			}
		}
	}
}

// renew moves a running sandbox to a new one on the same provider and
// image, and hibernates a paused one.
func (s *Sandbox) renew(ctx workflow.Context) error {
	switch s.st.State {
	case StateRunning:
		return s.markLost(ctx, s.moveTo(ctx, s.st.Config.Provider, s.st.Config.Spec.Image))
	case StatePaused:
		return s.hibernate(ctx)
	}
	return nil // it moved, ended or was lost meanwhile
}

// movesAt is when the sandbox moves, or zero.
func (s *Sandbox) movesAt() time.Time {
	if s.st.RenewFor != s.st.Ref.ID || s.st.Ref.MaxLifetime <= 0 {
		return time.Time{}
	}
	return s.st.RenewAt
}
