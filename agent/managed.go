package agent

import (
	"fmt"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/sandbox/ops"
	"github.com/berth-dev/berth/transfer"
)

// ConversationPrefix is where the session whose workflow id is
// workflowID keeps its conversation's segments in the blob store, and
// StreamPrefix where it streams the model's answers: what is deleted
// when the session is destroyed.
func ConversationPrefix(workflowID string) string {
	return chat.SegmentPrefix + conversationName(workflowID) + "/"
}

// StreamPrefix: see ConversationPrefix.
func StreamPrefix(workflowID string) string {
	return transfer.Outputs + "agent/" + conversationName(workflowID) + "/"
}

// ready says whether a turn may start: a message waits, and no fork or
// switch holds turns back.
func (s *session) ready() bool { return len(s.queue) > 0 && s.holds == 0 }

// between waits until the sandbox exists and no turn runs: the
// operations a manager sends act on a workspace at rest.
func (s *session) between(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return s.sbx != nil && !s.inTurn })
}

// registerManaged registers the Updates a session manager sends.
func (s *session) registerManaged(ctx workflow.Context) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateFork,
		func(ctx workflow.Context, req ForkRequest) (res ForkResult, err error) {
			if a := s.answered(ctx); a != nil {
				if ok, err := a.replay(&res); ok || err != nil {
					return res, err
				}
				return s.forkResult(a.Snapshot), nil
			}
			defer func() { s.remember(ctx, res, res.Fork.Snapshot, err) }()
			if err := s.between(ctx); err != nil {
				return ForkResult{}, err
			}
			s.holds++
			defer func() { s.holds-- }()
			id, err := s.sbx.ForkSnapshot(ctx, req.Owner)
			if err != nil {
				return ForkResult{}, sandbox.Failure(fmt.Errorf("fork the workspace: %w", err))
			}
			return s.forkResult(id), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req ForkRequest) error {
			if s.answered(ctx) != nil {
				return nil
			}
			if req.Owner == "" {
				return sandbox.Failure(fmt.Errorf("%w: a fork needs its owner's workflow id", errdefs.ErrBadInput))
			}
			return s.open()
		}})
	if err != nil {
		return err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateSwitch,
		func(ctx workflow.Context, req SwitchRequest) (st State, err error) {
			if a := s.answered(ctx); a != nil {
				return s.again(a)
			}
			defer func() { s.remember(ctx, st, "", err) }()
			if err := s.between(ctx); err != nil {
				return State{}, err
			}
			s.holds++
			defer func() { s.holds-- }()
			err = s.sbx.Switch(ctx, sandbox.Provider{Name: req.Provider, Image: req.Image})
			s.changed()
			if err != nil {
				return State{}, sandbox.Failure(err)
			}
			s.in.Provider = req.Provider
			if req.Image != "" {
				s.in.Image = req.Image
			}
			return s.state()
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req SwitchRequest) error {
			if s.answered(ctx) != nil {
				return nil
			}
			if req.Provider == "" {
				return sandbox.Failure(fmt.Errorf("%w: a switch needs a provider", errdefs.ErrBadInput))
			}
			return s.open()
		}})
	if err != nil {
		return err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdatePause,
		func(ctx workflow.Context) (st State, err error) {
			if a := s.answered(ctx); a != nil {
				return s.again(a)
			}
			defer func() { s.remember(ctx, st, "", err) }()
			if err := s.between(ctx); err != nil {
				return State{}, err
			}
			err = s.sbx.Pause(ctx)
			s.changed()
			if err != nil {
				return State{}, sandbox.Failure(err)
			}
			s.paused = true
			return s.state()
		},
		workflow.UpdateHandlerOptions{Validator: s.openOrAnswered})
	if err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateResume,
		func(ctx workflow.Context) (st State, err error) {
			if a := s.answered(ctx); a != nil {
				return s.again(a)
			}
			defer func() { s.remember(ctx, st, "", err) }()
			if err := workflow.Await(ctx, func() bool { return s.sbx != nil }); err != nil {
				return State{}, err
			}
			err = s.sbx.Resume(ctx)
			s.changed()
			if err != nil {
				return State{}, sandbox.Failure(err)
			}
			s.paused = false
			return s.state()
		},
		workflow.UpdateHandlerOptions{Validator: s.openOrAnswered})
}

// registerOps registers the sandbox's commands and files Updates, and
// the Query that says which of their commands run (package ops): a
// person reaches the workspace through the session, between turns and
// during one. Such an operation wakes a sandbox the manager paused, as
// a turn does.
func (s *session) registerOps(ctx workflow.Context) error {
	var err error
	s.ops, err = ops.Register(ctx, ops.Owner{
		Sandbox: func() *sandbox.Sandbox { return s.sbx },
		Open:    s.open,
		Using:   s.woken,
	})
	if err != nil {
		return err
	}
	return workflow.SetQueryHandler(ctx, ops.QuerySandbox, func() (ops.Status, error) {
		var st ops.Status
		if s.sbx != nil {
			st.Status = s.sbx.Status()
		}
		st.Running = s.ops.Running()
		return st, nil
	})
}

// forkResult is what a fork of the session now, from the workspace's
// snapshot id, starts from.
func (s *session) forkResult(snapshot string) ForkResult {
	// The queued messages are this session's, not the fork's.
	f := ForkFrom{Snapshot: snapshot, Conversation: s.segs, Unsent: s.unsent, NextTurn: s.nextTurn - len(s.queue),
		Turns: s.turns, Usage: s.usage}
	in := s.in
	in.Provider, in.Manager, in.Fork, in.Carried = s.sbx.Status().Provider, "", nil, nil
	// The fork's workspace is the snapshot, made now.
	in.FromSnapshot, in.Hibernated = "", false
	return ForkResult{Fork: f, Input: in}
}

// again answers a remembered Update whose result is a State: the
// remembered one, or the current one if it was too long to keep.
func (s *session) again(a *Answered) (State, error) {
	var st State
	if ok, err := a.replay(&st); ok || err != nil {
		return st, err
	}
	return s.state()
}

// woken tells the manager that a turn wakes the session it paused, so
// that its registry says so at once.
func (s *session) woken(ctx workflow.Context) {
	if !s.paused {
		return
	}
	s.paused = false
	// Histories from before this signal have none here.
	if s.in.Manager == "" || workflow.GetVersion(ctx, "tell-manager-woken", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	workflow.SignalExternalWorkflow(ctx, s.in.Manager, "", SignalManagerActive,
		ManagerSignal{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID})
}

// tellEnded signals the manager that the session's workflow ends, with
// err, unless it continues as new. A manager that is gone is no matter.
func tellEnded(ctx workflow.Context, manager string, err error) {
	if workflow.IsContinueAsNewError(err) {
		return
	}
	sig := ManagerSignal{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID}
	if err != nil {
		sig.Error = oneLine(err, "")
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.SignalExternalWorkflow(dctx, manager, "", SignalManagerEnded, sig).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Info("the manager was not told of the end", "manager", manager, "error", err)
	}
}
