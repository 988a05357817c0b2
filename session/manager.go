package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/termtext"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session/calls"
)

// MaxTitle is the longest title a session may have, in bytes.
const MaxTitle = 200

// ManagerInput configures a manager. Front ends start it with the zero
// value, under DefaultManagerID or an id of their own.
type ManagerInput struct {
	// Session holds what every session gets unless its CreateRequest says
	// otherwise (model queue, idle timeouts, ...). Its Manager, Fork and
	// Carried are the manager's to set.
	Session agent.SessionInput `json:"session,omitzero"`
	// Queue is the task queue of the sessions' workflows and of the
	// activities the manager calls; empty means the manager's own.
	Queue string `json:"queue,omitempty"`
	// ContinueAfter continues the manager as new, between operations,
	// once its history has this many events; zero means when the server
	// suggests it.
	ContinueAfter int `json:"continue_after,omitempty"`

	// Carried is set by the workflow itself when it continues as new.
	Carried *Carried `json:"carried,omitempty"`
}

// Carried is what a manager hands to its next run.
type Carried struct {
	Sessions []Info `json:"sessions,omitempty"`
	// Next is the number of the next session: numbers are never reused.
	Next int `json:"next"`
	// Ops counts the Updates sent to sessions, each named by its number.
	Ops  int `json:"ops"`
	Runs int `json:"runs"`
	// PausedAt is, for each paused session, the last turn it had
	// accepted when it was paused.
	PausedAt map[string]int `json:"paused_at,omitempty"`
}

// Register registers Manager under WorkflowName.
func Register(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(Manager, workflow.RegisterOptions{Name: WorkflowName})
}

// entry is a session in the registry.
type entry struct {
	Info
	// busy: an operation runs on the session; the next waits for it.
	busy       bool
	destroying bool
	// pausedAt is the last turn the session had accepted when it was
	// paused.
	pausedAt int
	// woke: the session said a message woke it while an operation ran
	// on it (a pause whose answer is on its way).
	woke bool
}

// accepted is the number of the last turn a session accepted.
func accepted(st agent.State) int { return st.Turn.Number + st.Queued }

type manager struct {
	id       string
	in       ManagerInput
	queue    string
	sessions []*entry
	next     int
	ops      int
	runs     int
	// started are the sessions that said their sandbox is made.
	started map[string]bool
}

// acts names the activities the manager calls.
var acts *calls.Activities

// Manager is the session manager's workflow: see the package doc.
func Manager(ctx workflow.Context, in ManagerInput) error {
	info := workflow.GetInfo(ctx)
	m := &manager{id: info.WorkflowExecution.ID, in: in, queue: in.Queue, next: 1, started: map[string]bool{}}
	if m.queue == "" {
		m.queue = info.TaskQueueName
	}
	if c := in.Carried; c != nil {
		for _, s := range c.Sessions {
			m.sessions = append(m.sessions, &entry{Info: s, pausedAt: c.PausedAt[s.ID]})
		}
		m.next, m.ops, m.runs = max(c.Next, 1), c.Ops, c.Runs
	}
	m.runs++
	if err := m.register(ctx); err != nil {
		return err
	}
	started := workflow.GetSignalChannel(ctx, SignalStarted)
	ended := workflow.GetSignalChannel(ctx, SignalEnded)
	active := workflow.GetSignalChannel(ctx, SignalActive)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(started, func(c workflow.ReceiveChannel, _ bool) {
				var sig Ended
				c.Receive(ctx, &sig)
				m.started[sig.WorkflowID] = true
			})
			sel.AddReceive(ended, func(c workflow.ReceiveChannel, _ bool) {
				var sig Ended
				c.Receive(ctx, &sig)
				m.onEnded(sig)
			})
			sel.AddReceive(active, func(c workflow.ReceiveChannel, _ bool) {
				var sig Ended
				c.Receive(ctx, &sig)
				m.onActive(sig)
			})
			sel.Select(ctx)
		}
	})
	tooLong := func() bool {
		if in.ContinueAfter > 0 {
			return workflow.GetInfo(ctx).GetCurrentHistoryLength() >= in.ContinueAfter
		}
		return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	}
	// Between operations, all handlers finished: nothing is left behind.
	if err := workflow.Await(ctx, func() bool { return tooLong() && workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	// Signals of this very task: an end is recorded; a start, no
	// operation waits for it any more.
	for {
		var sig Ended
		if !ended.ReceiveAsync(&sig) {
			break
		}
		m.onEnded(sig)
	}
	var gone Ended
	for started.ReceiveAsync(&gone) {
	}
	for {
		var sig Ended
		if !active.ReceiveAsync(&sig) {
			break
		}
		m.onActive(sig)
	}
	next := in
	next.Carried = &Carried{Sessions: m.infos(true), Next: m.next, Ops: m.ops, Runs: m.runs, PausedAt: map[string]int{}}
	for _, e := range m.sessions {
		if e.Status == StatusPaused {
			next.Carried.PausedAt[e.ID] = e.pausedAt
		}
	}
	return workflow.NewContinueAsNewError(ctx, WorkflowName, next)
}

// onEnded marks a session that ended on its own.
func (m *manager) onEnded(sig Ended) {
	for _, e := range m.sessions {
		if e.WorkflowID == sig.WorkflowID && !e.destroying {
			e.Status, e.Error = StatusEnded, sig.Error
		}
	}
}

// onActive marks a paused session that a message woke.
func (m *manager) onActive(sig Ended) {
	for _, e := range m.sessions {
		switch {
		case e.WorkflowID != sig.WorkflowID:
		case e.busy:
			e.woke = true
		case e.Status == StatusPaused:
			e.Status = StatusActive
		}
	}
}

func (m *manager) infos(all bool) []Info {
	out := []Info{}
	for _, e := range m.sessions {
		if all || e.Status != StatusEnded {
			out = append(out, e.Info)
		}
	}
	return out
}

func (m *manager) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QuerySessions, func() ([]Info, error) { return m.infos(true), nil }); err != nil {
		return err
	}
	err := workflow.SetUpdateHandler(ctx, UpdateModelStatus, func(ctx workflow.Context) (model.Status, error) {
		return agent.CheckModel(ctx, m.in.Session.ModelQueue), nil
	})
	if err != nil {
		return err
	}
	type handler struct {
		name      string
		fn, check any
	}
	handlers := []handler{
		{UpdateCreate, m.create, func(ctx workflow.Context, req CreateRequest) error {
			if req.MaxSteps < 0 || req.MaxSteps > agent.MaxMaxSteps {
				return badInput("max_steps %d: from 1 to %d", req.MaxSteps, agent.MaxMaxSteps)
			}
			if err := req.checkpoint(m.in.Session.Checkpoint).Validate(); err != nil {
				return failure(err)
			}
			if err := agent.ValidateFrom(req.FromSnapshot, false); err != nil {
				return failure(err)
			}
			return checkTitle(req.Title, "", true)
		}},
		{UpdateRename, m.rename, func(ctx workflow.Context, req RenameRequest) error {
			e, err := m.resolve(req.Session)
			if err != nil {
				return err
			}
			return checkTitle(req.Title, e.ID, false)
		}},
		{UpdateFork, m.fork, func(ctx workflow.Context, req ForkRequest) error {
			if _, err := m.live(req.Session); err != nil {
				return err
			}
			return checkTitle(req.Title, "", true)
		}},
		{UpdateSwitch, m.switchProvider, func(ctx workflow.Context, req SwitchRequest) error {
			if req.Provider == "" {
				return badInput("a switch needs a provider")
			}
			_, err := m.live(req.Session)
			return err
		}},
		{UpdatePause, m.pause, func(ctx workflow.Context, ref Ref) error { _, err := m.live(ref.Session); return err }},
		{UpdateResume, m.resume, func(ctx workflow.Context, ref Ref) error { _, err := m.live(ref.Session); return err }},
		{UpdateDestroy, m.destroy, func(ctx workflow.Context, req DestroyRequest) error {
			_, err := m.resolve(req.Session)
			return err
		}},
		{UpdateList, m.list, nil},
	}
	for _, h := range handlers {
		opts := workflow.UpdateHandlerOptions{}
		if h.check != nil {
			opts.Validator = h.check
		}
		if err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.fn, opts); err != nil {
			return err
		}
	}
	return nil
}

// resolve finds the session a ref names: by ID, else by title when
// exactly one session has it.
func (m *manager) resolve(ref string) (*entry, error) {
	if ref == "" {
		return nil, badInput("no session named: give its ID or its title")
	}
	var found []*entry
	for _, e := range m.sessions {
		if e.ID == ref {
			return e, nil
		}
		if e.Title == ref {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return nil, failure(errdefs.Errorf(errdefs.NotFound, "no session %q", ref))
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, e := range found {
		ids[i] = e.ID
	}
	return nil, badInput("%d sessions have the title %q (%s): name one by its ID", len(found), ref, strings.Join(ids, ", "))
}

// live resolves a session whose workflow has not ended.
func (m *manager) live(ref string) (*entry, error) {
	e, err := m.resolve(ref)
	if err == nil && e.Status == StatusEnded {
		err = failure(errdefs.Errorf(errdefs.NotFound, "session %s has ended: %s", e.ID, orUnsaid(e.Error)))
	}
	return e, err
}

func orUnsaid(s string) string {
	if s == "" {
		return "it was ended by " + agent.UpdateEnd
	}
	return s
}

// checkTitle refuses a title that is too long, not one line of text, or
// that looks like another session's ID.
func checkTitle(title, id string, emptyOK bool) error {
	switch {
	case title == "" && emptyOK:
		return nil
	case strings.TrimSpace(title) == "":
		return badInput("the title is empty")
	case len(title) > MaxTitle:
		return badInput("the title has %d bytes, more than %d", len(title), MaxTitle)
	case !utf8.ValidString(title):
		return badInput("the title is not UTF-8")
	case strings.IndexFunc(title, unicode.IsControl) >= 0:
		return badInput("the title has control characters: one line of text")
	case IsID(title) && title != id:
		return badInput("the title %q would read as a session ID", title)
	}
	return nil
}

// hold waits until no other operation runs on e, and holds it until the
// returned function is called.
func (m *manager) hold(ctx workflow.Context, e *entry) (func(), error) {
	if err := workflow.Await(ctx, func() bool { return !e.busy }); err != nil {
		return nil, err
	}
	e.busy = true
	return func() { e.busy = false }, nil
}

// add registers a new session, creating.
func (m *manager) add(ctx workflow.Context, title, prov string, approvals bool, forkOf string) *entry {
	id := fmt.Sprintf("s%d", m.next)
	m.next++
	if title == "" {
		title = id
	}
	if prov == "" {
		prov = sandbox.DefaultProvider
	}
	e := &entry{Info: Info{ID: id, WorkflowID: WorkflowID(m.id, id), Title: title, Provider: prov, Status: StatusCreating,
		Approvals: approvals, ForkOf: forkOf, Created: workflow.Now(ctx)}, busy: true}
	m.sessions = append(m.sessions, e)
	return e
}

func (m *manager) remove(e *entry) {
	for i, x := range m.sessions {
		if x == e {
			m.sessions = append(m.sessions[:i], m.sessions[i+1:]...)
			return
		}
	}
}

func (m *manager) create(ctx workflow.Context, req CreateRequest) (Info, error) {
	in := m.in.Session
	if req.Provider != "" {
		in.Provider, in.Image = req.Provider, req.Image
	} else if req.Image != "" {
		in.Image = req.Image
	}
	if req.Network != nil {
		in.Network = *req.Network
	}
	if req.SystemPrompt != "" {
		in.SystemPrompt = req.SystemPrompt
	}
	if req.MaxSteps != 0 {
		in.MaxSteps = req.MaxSteps
	}
	if req.IdleTimeout != 0 {
		in.IdleTimeout = req.IdleTimeout
	}
	if req.HibernateAfter != 0 {
		in.HibernateAfter = req.HibernateAfter
	}
	in.Approvals = in.Approvals || req.Approvals
	in.Checkpoint = req.checkpoint(in.Checkpoint)
	in.Fork, in.Carried = nil, nil
	in.FromSnapshot, in.Hibernated = req.FromSnapshot, req.Hibernated
	e := m.add(ctx, req.Title, in.Provider, in.Approvals, "")
	defer func() { e.busy = false }()
	if err := m.start(ctx, e, in); err != nil {
		m.remove(e)
		return Info{}, err
	}
	return e.Info, nil
}

// checkpoint is the checkpoint policy of a session made by req: p,
// the manager's, with each rule req sets replaced.
func (req CreateRequest) checkpoint(p sandbox.CheckpointPolicy) sandbox.CheckpointPolicy {
	if req.CheckpointEvery != 0 {
		p.Every = req.CheckpointEvery
	}
	if req.CheckpointInterval != 0 {
		p.Interval = req.CheckpointInterval
	}
	if req.CheckpointIdle != 0 {
		p.Idle = req.CheckpointIdle
	}
	return p
}

// maxSummary bounds a session's summary, as workflows.MaxSummary does
// every berth workflow's.
const maxSummary = 200

// sessionSummary is a session's summary, the StaticSummary of its
// workflow: its id, title and provider, on one line safe to show.
func sessionSummary(i Info) string {
	return termtext.Line(fmt.Sprintf("session %s %q on %s", i.ID, i.Title, i.Provider), maxSummary)
}

// start starts a session's workflow and waits until its sandbox is made
// or its workflow ends.
func (m *manager) start(ctx workflow.Context, e *entry, in agent.SessionInput) error {
	in.Manager = m.id
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID: e.WorkflowID, TaskQueue: m.queue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
		StaticSummary:     sessionSummary(e.Info),
	})
	child := workflow.ExecuteChildWorkflow(cctx, agent.WorkflowName, in)
	if err := child.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		return failIn("start session "+e.ID, err)
	}
	if err := workflow.Await(ctx, func() bool { return m.started[e.WorkflowID] || child.IsReady() }); err != nil {
		return err
	}
	if m.started[e.WorkflowID] {
		delete(m.started, e.WorkflowID)
		if e.Status == StatusCreating {
			e.Status = StatusActive
		}
		return nil
	}
	err := child.Get(ctx, nil)
	if err == nil {
		err = errdefs.Errorf(errdefs.NotFound, "its workflow ended at once")
	}
	return failIn("start session "+e.ID, err)
}

func (m *manager) rename(ctx workflow.Context, req RenameRequest) (Info, error) {
	e, err := m.resolve(req.Session)
	if err != nil {
		return Info{}, err
	}
	e.Title = req.Title
	return e.Info, nil
}

func (m *manager) fork(ctx workflow.Context, req ForkRequest) (Info, error) {
	src, err := m.live(req.Session)
	if err != nil {
		return Info{}, err
	}
	release, err := m.hold(ctx, src)
	if err != nil {
		return Info{}, err
	}
	defer release()
	e := m.add(ctx, req.Title, cmp(req.Provider, src.Provider), src.Approvals, src.ID)
	defer func() { e.busy = false }()
	var res agent.ForkResult
	if err := m.tell(ctx, src, agent.UpdateFork, agent.ForkRequest{Owner: e.WorkflowID}, &res); err != nil {
		m.remove(e)
		return Info{}, err
	}
	// The fork's conversation is its own copy: each session deletes its
	// own when it is destroyed.
	to := agent.ConversationPrefix(e.WorkflowID)
	segs := make([]chat.Segment, len(res.Fork.Conversation))
	copies := make([]calls.BlobCopy, len(segs))
	for i, seg := range res.Fork.Conversation {
		segs[i] = seg
		segs[i].Key = to + seg.SHA256
		copies[i] = calls.BlobCopy{From: seg.Key, To: segs[i].Key}
	}
	res.Fork.Conversation = segs
	fail := func(err error) (Info, error) {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		if rerr := sandbox.RemoveSnapshot(dctx, m.queue, res.Fork.Snapshot); rerr != nil && !isKind(rerr, errdefs.NotFound) {
			workflow.GetLogger(ctx).Warn("remove a failed fork's snapshot", "snapshot", res.Fork.Snapshot, "error", rerr)
		}
		if derr := m.deleteBlobs(dctx, to); derr != nil {
			workflow.GetLogger(ctx).Warn("delete a failed fork's conversation", "prefix", to, "error", derr)
		}
		m.remove(e)
		return Info{}, err
	}
	if len(copies) > 0 {
		if err := workflow.ExecuteActivity(m.activity(ctx), acts.CopyBlobs, copies).Get(ctx, nil); err != nil {
			return fail(failIn("copy the conversation", err))
		}
	}
	in := res.Input
	if req.Provider != "" && req.Provider != in.Provider {
		in.Provider = req.Provider
	}
	in.Fork = &res.Fork
	if err := m.start(ctx, e, in); err != nil {
		return fail(err)
	}
	return e.Info, nil
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// operate runs an operation on a live session: status is its status
// while it runs; done, on success, sets what the operation changed.
func (m *manager) operate(ctx workflow.Context, ref, status, update string, arg any, done func(*entry, agent.State)) (Info, error) {
	e, err := m.live(ref)
	if err != nil {
		return Info{}, err
	}
	release, err := m.hold(ctx, e)
	if err != nil {
		return Info{}, err
	}
	defer release()
	if e.Status == StatusEnded { // while it waited
		return Info{}, failure(errdefs.Errorf(errdefs.NotFound, "session %s has ended: %s", e.ID, orUnsaid(e.Error)))
	}
	prev := e.Status
	e.woke = false
	if status != "" {
		e.Status = status
	}
	var st agent.State
	if err := m.tell(ctx, e, update, arg, &st); err != nil {
		if e.Status == status {
			e.Status = prev
		}
		return Info{}, err
	}
	if e.Status != StatusEnded {
		done(e, st)
	}
	return e.Info, nil
}

func (m *manager) switchProvider(ctx workflow.Context, req SwitchRequest) (Info, error) {
	return m.operate(ctx, req.Session, StatusSwitching, agent.UpdateSwitch,
		agent.SwitchRequest{Provider: req.Provider, Image: req.Image},
		func(e *entry, _ agent.State) { e.Provider, e.Status = req.Provider, StatusActive })
}

func (m *manager) pause(ctx workflow.Context, ref Ref) (Info, error) {
	return m.operate(ctx, ref.Session, "", agent.UpdatePause, nil, func(e *entry, st agent.State) {
		e.Status, e.pausedAt = StatusPaused, accepted(st)
		if e.woke { // while its answer was on its way
			e.Status = StatusActive
		}
	})
}

func (m *manager) resume(ctx workflow.Context, ref Ref) (Info, error) {
	return m.operate(ctx, ref.Session, "", agent.UpdateResume, nil, func(e *entry, _ agent.State) { e.Status = StatusActive })
}

func (m *manager) destroy(ctx workflow.Context, req DestroyRequest) (DestroyResult, error) {
	e, err := m.resolve(req.Session)
	if err != nil {
		return DestroyResult{}, err
	}
	release, err := m.hold(ctx, e)
	if err != nil {
		return DestroyResult{}, err
	}
	defer release()
	res := DestroyResult{Session: e.ID}
	if e.Status != StatusEnded {
		e.destroying = true
		var end agent.EndResult
		err := m.tell(ctx, e, agent.UpdateEnd, agent.EndRequest{Destroy: !req.Keep}, &end)
		if err != nil && !isKind(err, errdefs.NotFound) { // not closed already
			e.destroying = false
			return DestroyResult{}, err
		}
		res.Snapshot = end.Snapshot
	}
	if !req.Keep {
		for _, prefix := range []string{agent.ConversationPrefix(e.WorkflowID), agent.StreamPrefix(e.WorkflowID)} {
			if err := m.deleteBlobs(ctx, prefix); err != nil {
				// Its workflow is gone: destroying it again deletes what is left.
				e.Status, e.Error, e.destroying = StatusEnded, "destroyed, but its conversation was not deleted", false
				return DestroyResult{}, failIn(fmt.Sprintf("session %s ended, but deleting %s failed", e.ID, prefix), err)
			}
		}
	}
	m.remove(e)
	return res, nil
}

func (m *manager) list(ctx workflow.Context, req ListRequest) ([]Info, error) {
	// Asks the server of the sessions it lists as live: one terminated
	// behind the manager's back never said it ended.
	var asked []*entry
	var ids []string
	for _, e := range m.sessions {
		if e.Status != StatusEnded && e.Status != StatusCreating && !e.destroying {
			asked = append(asked, e)
			ids = append(ids, e.WorkflowID)
		}
	}
	if len(ids) > 0 {
		var statuses []string
		if err := workflow.ExecuteActivity(m.activity(ctx), acts.WorkflowStatuses, ids).Get(ctx, &statuses); err != nil {
			return nil, failIn("ask the server of the sessions", err)
		}
		for i, e := range asked {
			if statuses[i] != calls.WorkflowRunning && e.Status != StatusEnded && !e.destroying {
				e.Status = StatusEnded
				e.Error = fmt.Sprintf("%s: its workflow ended without a word to its manager", statuses[i])
			}
		}
	}
	// A paused session that took a message since is active again.
	for _, e := range m.sessions {
		if e.Status != StatusPaused || e.busy {
			continue
		}
		var st agent.State
		err := workflow.ExecuteActivity(m.activity(ctx), acts.QueryWorkflow,
			calls.QueryWorkflowInput{WorkflowID: e.WorkflowID, Query: agent.QueryState}).Get(ctx, &st)
		if err == nil && e.Status == StatusPaused && (st.Sandbox.State == sandbox.StateRunning || accepted(st) > e.pausedAt) {
			e.Status = StatusActive
		}
	}
	return m.infos(req.All), nil
}

// tell sends an Update to a session's workflow, through an activity:
// the Update's id is the manager's, numbered, so that a retry attaches
// to the first try's. A session whose workflow is closed is marked
// ended, and the error is NotFound.
func (m *manager) tell(ctx workflow.Context, e *entry, update string, arg, result any) error {
	m.ops++
	in := calls.UpdateWorkflowInput{WorkflowID: e.WorkflowID, Update: update,
		UpdateID: fmt.Sprintf("%s#%d", m.id, m.ops)}
	if arg != nil {
		b, err := json.Marshal(arg)
		if err != nil {
			return failure(err)
		}
		in.Arg = b
	}
	opts := workflow.ActivityOptions{TaskQueue: m.queue, StartToCloseTimeout: time.Hour, HeartbeatTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{MaximumInterval: 10 * time.Second}}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), acts.UpdateWorkflow, in).Get(ctx, result)
	if err == nil {
		return nil
	}
	if isKind(err, errdefs.NotFound) && strings.Contains(err.Error(), "has ended") && !e.destroying {
		e.Status, e.Error = StatusEnded, "its workflow has ended"
	}
	return failIn("session "+e.ID, err)
}

func (m *manager) activity(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: m.queue, StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumInterval: 10 * time.Second, MaximumAttempts: 20}})
}

func (m *manager) deleteBlobs(ctx workflow.Context, prefix string) error {
	return workflow.ExecuteActivity(m.activity(ctx), acts.DeleteBlobs, prefix).Get(ctx, nil)
}

// isKind says whether err is, or was raised as, an error of kind k.
func isKind(err error, k errdefs.Kind) bool { return temporalerr.KindOf(err) == k }

func badInput(format string, args ...any) error {
	return failure(errdefs.Errorf(errdefs.BadInput, format, args...))
}

// failure is the error an Update fails with: an application error typed
// as the provider error's kind, in one line, that a client reads with
// temporalerr.KindOf and temporalerr.OneLine.
func failure(err error) error {
	if err == nil || temporal.IsCanceledError(err) {
		return err
	}
	return sandbox.Failure(err)
}

// failIn is failure for an error of what the manager waited for (an
// activity, a child workflow): typed as the first application error in
// its chain, said as what, then that error's message, without the SDK's
// wrappers between.
func failIn(what string, err error) error {
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		return nil
	case temporal.IsCanceledError(err):
		return err
	case errors.As(err, &app):
		return temporal.NewNonRetryableApplicationError(what+": "+strings.Join(strings.Fields(app.Message()), " "), string(temporalerr.KindOf(err)), nil)
	}
	return failure(fmt.Errorf("%s: %w", what, err))
}
