package berth

import (
	"context"
	"fmt"
	"strings"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/transfer"
)

// Sessions drives the coding agent's sessions: the registry through
// their manager workflow (package session), the conversation through
// each session's own workflow (package agent). The manager is started
// by the first operation that needs it.
type Sessions struct {
	c *Client
	// Manager is the manager workflow's id, and Queue the task queue it
	// is started on.
	Manager, Queue string
}

// Sessions returns the sessions of the manager whose workflow id is
// manager (session.DefaultManagerID when empty), on the default queue.
func (c *Client) Sessions(manager string) *Sessions {
	if manager == "" {
		manager = session.DefaultManagerID
	}
	return &Sessions{c: c, Manager: manager, Queue: sandbox.DefaultQueue}
}

// manage runs one of the manager's Updates, starting the manager if it
// is not running. Sent again after a server restart, it runs once.
func (s *Sessions) manage(ctx context.Context, name string, out any, args ...any) error {
	start := client.StartWorkflowOptions{
		ID: s.Manager, TaskQueue: s.Queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            session.ManagerSummary,
	}
	return s.c.updateWithStart(ctx, start, session.WorkflowName, session.ManagerInput{}, name, out, args...)
}

// List lists the sessions, but for those that ended.
func (s *Sessions) List(ctx context.Context) ([]session.Info, error) {
	return s.list(ctx, session.ListRequest{})
}

// ListAll lists the sessions, those that ended on their own too.
func (s *Sessions) ListAll(ctx context.Context) ([]session.Info, error) {
	return s.list(ctx, session.ListRequest{All: true})
}

func (s *Sessions) list(ctx context.Context, req session.ListRequest) ([]session.Info, error) {
	var infos []session.Info
	err := s.manage(ctx, session.UpdateList, &infos, req)
	return infos, err
}

// Create starts a session. Bad settings fail here, at once, before
// anything is started.
func (s *Sessions) Create(ctx context.Context, req session.CreateRequest) (session.Info, error) {
	policy := CheckpointPolicy{Every: req.CheckpointEvery, Interval: req.CheckpointInterval, Idle: req.CheckpointIdle}
	if err := policy.Validate(); err != nil {
		return session.Info{}, err
	}
	var info session.Info
	err := s.manage(ctx, session.UpdateCreate, &info, req)
	return info, err
}

// Rename gives a session a new title.
func (s *Sessions) Rename(ctx context.Context, req session.RenameRequest) (session.Info, error) {
	var info session.Info
	err := s.manage(ctx, session.UpdateRename, &info, req)
	return info, err
}

// Fork starts a new session with the conversation and a copy of the
// workspace of another, and returns the new one.
func (s *Sessions) Fork(ctx context.Context, req session.ForkRequest) (session.Info, error) {
	var info session.Info
	err := s.manage(ctx, session.UpdateFork, &info, req)
	return info, err
}

// Switch moves a session's workspace to another provider.
func (s *Sessions) Switch(ctx context.Context, req session.SwitchRequest) (session.Info, error) {
	var info session.Info
	err := s.manage(ctx, session.UpdateSwitch, &info, req)
	return info, err
}

// Pause pauses a session's sandbox until Resume or its next message.
func (s *Sessions) Pause(ctx context.Context, id string) (session.Info, error) {
	var info session.Info
	err := s.manage(ctx, session.UpdatePause, &info, session.Ref{Session: id})
	return info, err
}

// Resume resumes a paused session's sandbox.
func (s *Sessions) Resume(ctx context.Context, id string) (session.Info, error) {
	var info session.Info
	err := s.manage(ctx, session.UpdateResume, &info, session.Ref{Session: id})
	return info, err
}

// Destroy ends a session and removes it from the registry.
func (s *Sessions) Destroy(ctx context.Context, req session.DestroyRequest) (session.DestroyResult, error) {
	var res session.DestroyResult
	err := s.manage(ctx, session.UpdateDestroy, &res, req)
	return res, err
}

// Registry returns the registry as it stands, ended sessions too, at
// once: without starting the manager, nor asking the server which
// sessions still run. No manager yet is an error NotFound says is one.
func (s *Sessions) Registry(ctx context.Context) ([]session.Info, error) {
	var infos []session.Info
	err := s.c.query(ctx, s.Manager, "", session.QuerySessions, &infos)
	return infos, err
}

// Info finds a session by ID or title, as the manager lists it now.
func (s *Sessions) Info(ctx context.Context, ref string) (session.Info, error) {
	infos, err := s.Registry(ctx)
	if err != nil {
		if temporalerr.WorkflowNotFound(err) {
			return session.Info{}, errdefs.Errorf(errdefs.NotFound, "session %q: no session exists yet (berth session new starts one)", ref)
		}
		return session.Info{}, err
	}
	var found []session.Info
	for _, in := range infos {
		if in.ID == ref {
			return in, nil
		}
		if in.Title == ref {
			found = append(found, in)
		}
	}
	switch len(found) {
	case 0:
		return session.Info{}, errdefs.Errorf(errdefs.NotFound, "no session %q (berth session ls lists them)", ref)
	case 1:
		return found[0], nil
	}
	return session.Info{}, errdefs.Errorf(errdefs.BadInput, "%d sessions have the title %q: name one by its id", len(found), ref)
}

// workflowID is the workflow of the session ref names: an ID needs no
// lookup.
func (s *Sessions) workflowID(ctx context.Context, ref string) (string, error) {
	if session.IsID(ref) {
		return session.WorkflowID(s.Manager, ref), nil
	}
	info, err := s.Info(ctx, ref)
	return info.WorkflowID, err
}

// session runs an Update of a session's own workflow.
func (s *Sessions) session(ctx context.Context, ref, name string, out any, arg any) error {
	wid, err := s.workflowID(ctx, ref)
	if err != nil {
		return err
	}
	err = s.c.update(ctx, wid, "", name, out, arg)
	if temporalerr.WorkflowNotFound(err) {
		return errdefs.Errorf(errdefs.NotFound, "session %s does not exist or has ended (berth session ls -a)", ref)
	}
	return err
}

// Send sends a message to a session and returns the number of the turn
// that will answer it, once the session has accepted it.
func (s *Sessions) Send(ctx context.Context, ref, message string) (int, error) {
	var res agent.SendResult
	err := s.session(ctx, ref, agent.UpdateSend, &res, agent.SendRequest{Message: message})
	return res.Turn, err
}

// Wait returns a session's state once its Version is past after: as
// soon as something changes. It may also return the state unchanged (the
// session continued as new): ask again.
//
// The arguments of a call awaiting approval are whole, and so is the
// answer of the current turn once it is done; the answers of the turns
// before may be only their start (TurnState.AnswerStored): State reads
// them.
func (s *Sessions) Wait(ctx context.Context, ref string, after int) (agent.State, error) {
	var st agent.State
	err := s.session(ctx, ref, agent.UpdateWait, &st, agent.WaitRequest{After: after})
	if err != nil {
		return st, err
	}
	return st, s.whole(ctx, ref, &st.Turn, st.Turn.Status == agent.StatusDone)
}

// State returns a session's state now, with its turns' answers whole
// and the arguments of a call awaiting approval.
func (s *Sessions) State(ctx context.Context, ref string) (agent.State, error) {
	wid, err := s.workflowID(ctx, ref)
	if err != nil {
		return agent.State{}, err
	}
	var st agent.State
	err = s.c.query(ctx, wid, "", agent.QueryState, &st)
	if temporalerr.WorkflowNotFound(err) {
		return st, errdefs.Errorf(errdefs.NotFound, "session %s does not exist or has ended (berth session ls -a)", ref)
	}
	if err != nil {
		return st, err
	}
	if err := s.whole(ctx, ref, &st.Turn, true); err != nil {
		return st, err
	}
	for i := range st.Turns {
		if err := s.whole(ctx, ref, &st.Turns[i], true); err != nil {
			return st, err
		}
	}
	return st, nil
}

// whole reads what a turn's state names as stored whole, in place of
// its start: the answer, when answer is set, and the arguments of a
// call awaiting approval (a person must see what they approve).
func (s *Sessions) whole(ctx context.Context, ref string, t *agent.TurnState, answer bool) error {
	if answer && t.AnswerStored != nil {
		text, err := s.ReadStored(ctx, ref, *t.AnswerStored)
		if err != nil {
			return err
		}
		t.Answer, t.AnswerStored = text, nil
	}
	for i := range t.Calls {
		c := &t.Calls[i]
		if c.Status != agent.StatusApproval || c.ArgumentsStored == nil {
			continue
		}
		args, err := s.ReadStored(ctx, ref, *c.ArgumentsStored)
		if err != nil {
			return err
		}
		c.Arguments, c.ArgumentsStored = args, nil
	}
	return nil
}

// ReadStored reads whole a text a session's state names as stored (a
// long answer, a tool call's long arguments), through the session's
// relay; one it cannot read whole is an error.
func (s *Sessions) ReadStored(ctx context.Context, ref string, st chat.Stored) (string, error) {
	wid, err := s.workflowID(ctx, ref)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := s.c.ReadStream(ctx, wid, st.Key, 0, st.Size, &b); err != nil {
		return "", fmt.Errorf("read %s of session %s: %w", st.Key, ref, err)
	}
	return b.String(), nil
}

// Approve approves, or denies, the tool call callID awaiting approval.
func (s *Sessions) Approve(ctx context.Context, ref, callID string, approve bool) error {
	return s.session(ctx, ref, agent.UpdateApprove, nil, agent.ApproveRequest{CallID: callID, Approve: approve})
}

// Follow calls see with each new state of a session until turn has
// finished, and returns the turn as it finished. A turn that failed is
// returned with its Error set, not as an error.
func (s *Sessions) Follow(ctx context.Context, ref string, turn int, see func(agent.State) error) (agent.TurnState, error) {
	after := -1
	for {
		st, err := s.Wait(ctx, ref, after)
		if err != nil {
			return agent.TurnState{}, err
		}
		after = st.Version
		if see != nil {
			if err := see(st); err != nil {
				return agent.TurnState{}, err
			}
		}
		if t, ok := finished(st, turn); ok {
			return t, s.whole(ctx, ref, &t, true)
		}
		if st.Ended {
			return agent.TurnState{}, errdefs.Errorf(errdefs.NotFound, "session %s ended before turn %d finished", ref, turn)
		}
	}
}

// finished finds turn among the state's finished turns.
func finished(st agent.State, turn int) (agent.TurnState, bool) {
	if st.Turn.Number == turn && (st.Turn.Status == agent.StatusDone || st.Turn.Status == agent.StatusFailed) {
		return st.Turn, true
	}
	for _, t := range st.Turns {
		if t.Number == turn {
			return t, true
		}
	}
	return agent.TurnState{}, false
}

// Read returns what is stored, from offset on, of a stream a session's
// state names as it is written: a running call's Stdout or Stderr, a
// model call's Stream. It returns at most transfer.MaxChunk bytes, none
// when nothing new is there yet (or the stream is not stored yet).
func (s *Sessions) Read(ctx context.Context, ref, key string, offset int64) ([]byte, error) {
	wid, err := s.workflowID(ctx, ref)
	if err != nil {
		return nil, err
	}
	return s.c.readChunk(ctx, wid, key, offset, transfer.MaxChunk)
}

// ModelStatus asks a worker serving the sessions' model what it finds
// of it now: ready, unknown, unavailable and why, or none configured.
func (s *Sessions) ModelStatus(ctx context.Context) (model.Status, error) {
	var st model.Status
	err := s.manage(ctx, session.UpdateModelStatus, &st)
	return st, err
}
