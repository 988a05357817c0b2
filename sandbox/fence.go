package sandbox

import (
	"errors"
	"strconv"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
)

// What a host asks a sandbox's workflow (see activities.QueryIncarnation
// and activities.UpdateDrain): a host that comes back after its
// sandboxes moved destroys the copies their handles no longer use
// (hostworker, the reaper), and a host that stops hibernates the idle
// ones, so that they wake on another host.

// serve registers the handle's answers to its hosts, named for its base.
func (s *Sandbox) serve(ctx workflow.Context) {
	base := s.st.Base
	// Registering a name twice replaces the handler: only this handle
	// answers for its base.
	_ = workflow.SetQueryHandler(ctx, activities.QueryIncarnation+base, func() (activities.Incarnation, error) {
		return s.incarnation(), nil
	})
	_ = workflow.SetUpdateHandlerWithOptions(ctx, activities.UpdateDrain+base, s.drain,
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, in activities.DrainInput) error { return s.drainable(in.ID) }})
}

// incarnation is the copy the handle uses now.
func (s *Sandbox) incarnation() activities.Incarnation {
	ref := s.st.Ref
	gen := 1
	if rest, ok := strings.CutPrefix(ref.ID, s.st.Base+"-"); ok {
		gen, _ = strconv.Atoi(rest)
	}
	live := !s.detached && (s.st.State == StateRunning || s.st.State == StatePaused)
	return activities.Incarnation{ID: ref.ID, Queue: ref.Queue, Generation: gen, Live: live}
}

// drainable says why the handle would not hibernate sandbox id for its
// host now, if it would not: a rejected Update leaves no trace in history.
func (s *Sandbox) drainable(id string) error {
	switch {
	case s.detached:
		return errors.New("the handle was carried to another run")
	case s.st.Ref.ID != id:
		return errors.New("not the sandbox's current copy")
	case s.st.State != StateRunning && s.st.State != StatePaused:
		return errors.New("the sandbox is " + string(s.st.State))
	case s.st.Config.NoAutoResume:
		return errors.New("automatic resume is off: it stays on its host")
	}
	return nil
}

// drain hibernates sandbox in.ID, for its host that is stopping, once
// no operation is under way in it, waiting up to in.Wait for that: the
// next operation wakes it on a host that serves.
func (s *Sandbox) drain(ctx workflow.Context, in activities.DrainInput) (activities.DrainResult, error) {
	idle := func() bool { return !s.st.busy && s.st.inflight == 0 }
	if !idle() {
		ok, err := workflow.AwaitWithTimeout(ctx, in.Wait, idle)
		if err != nil || !ok {
			return activities.DrainResult{Reason: "the sandbox is busy"}, nil
		}
	}
	if err := s.drainable(in.ID); err != nil {
		return activities.DrainResult{Reason: err.Error()}, nil
	}
	if err := s.transition(ctx, s.hibernate); err != nil {
		return activities.DrainResult{Reason: err.Error()}, nil
	}
	return activities.DrainResult{Hibernated: s.st.State == StateHibernated}, nil
}
