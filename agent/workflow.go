package agent

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/sandbox/ops"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/transfer/relay"
)

// session is a Session workflow's state.
type session struct {
	in   SessionInput
	conv string // the conversation's name in the blob store
	sbx  *sandbox.Sandbox

	segs     []chat.Segment
	messages int // in segs
	unsent   []chat.Message
	queue    []queued
	nextTurn int
	turn     TurnState
	turns    []TurnState
	usage    chat.Usage
	runs     int
	inTurn   bool
	running  string // the id of the tool call running
	// holds counts the operations (fork, switch) that keep turns from
	// starting while they run.
	holds int

	// approvals are the decisions on calls awaiting approval, by call id.
	awaiting  map[string]bool
	decisions map[string]bool

	// ending: an EndRequest waits; ended: the session has ended.
	// endsDone counts the EndRequests answered.
	ending, ended bool
	destroy       bool
	endsDone      int
	endResult     EndResult
	endErr        error

	// version counts the changes of the state, for UpdateWait; releasing
	// answers the waiters at once, for the run to continue as new.
	version   int
	releasing bool

	// answers are the last answers to a manager's Updates, by id.
	answers []Answered
	// paused: UpdatePause paused the sandbox, and no turn woke it since.
	paused bool

	// ops are the sandbox's commands and files Updates, which a person
	// sends through the session's id (berth sandbox exec s1): they act
	// on the workspace and never enter the conversation.
	ops *ops.Ops
}

// Session is the coding agent's workflow: see the package doc. It fails
// with an application error typed as sandbox.Failure types it.
func Session(ctx workflow.Context, in SessionInput) (err error) {
	if in.Manager != "" {
		// Last, once the sandbox is gone: the manager hears of the end.
		defer func() { tellEnded(ctx, in.Manager, err) }()
	}
	defer func() { err = sandbox.Failure(err) }()
	if err := in.validate(); err != nil {
		return err
	}
	s := &session{in: in, conv: conversationName(workflow.GetInfo(ctx).WorkflowExecution.ID),
		nextTurn: 1, turn: TurnState{Status: StatusIdle},
		awaiting: map[string]bool{}, decisions: map[string]bool{}}
	if c := in.Carried; c != nil {
		s.segs, s.unsent, s.queue, s.nextTurn = c.Conversation, c.Unsent, c.Queue, c.NextTurn
		s.turn, s.turns, s.usage, s.runs, s.version = c.Turn, c.Turns, c.Usage, c.Runs, c.Version
		s.answers, s.paused = c.Answers, c.Paused
	} else if f := in.Fork; f != nil {
		s.segs, s.unsent, s.nextTurn, s.turns, s.usage = f.Conversation, f.Unsent, max(f.NextTurn, 1), f.Turns, f.Usage
	}
	for _, seg := range s.segs {
		s.messages += seg.Messages
	}
	s.runs++
	// Handlers first: a message that comes while the sandbox is being
	// created is accepted, and waits for it.
	if err := s.register(ctx); err != nil {
		return err
	}
	// The relay serves the model's streams and the sandbox's outputs,
	// and takes uploads for the sandbox's Updates to import.
	stream := StreamPrefix(workflow.GetInfo(ctx).WorkflowExecution.ID)
	err = relay.Serve(ctx, func() transfer.Served {
		return transfer.Served{Prefixes: append(s.sbx.Served(), stream), Uploads: true}
	})
	if err != nil {
		return err
	}
	if in.Carried != nil {
		s.sbx = sandbox.Reattach(ctx, in.Carried.Sandbox)
	} else {
		opts := []sandbox.Option{sandbox.WithIdleTimeout(in.IdleTimeout), sandbox.WithHibernateAfter(in.HibernateAfter), sandbox.WithNetwork(in.Network),
			sandbox.WithCheckpoint(in.Checkpoint), sandbox.WithHostTimeout(in.HostTimeout)}
		switch {
		case in.Fork != nil:
			opts = append(opts, sandbox.FromCheckpoint(in.Fork.Snapshot))
		case in.FromSnapshot != "":
			opts = append(opts, sandbox.FromSnapshot(in.FromSnapshot))
		}
		start := sandbox.New
		if in.Hibernated {
			start = sandbox.StartHibernated
		}
		s.sbx, err = start(ctx, sandbox.Provider{Name: in.Provider, Image: in.Image}, opts...)
		if err != nil {
			return err
		}
		if in.Manager != "" {
			workflow.SignalExternalWorkflow(ctx, in.Manager, "", SignalManagerStarted,
				ManagerSignal{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID})
		}
	}
	defer func() {
		// Does nothing once the sandbox is carried to the next run.
		if serr := s.sbx.Stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()

	signals := workflow.GetSignalChannel(ctx, SignalMessage)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var req SendRequest
			signals.Receive(ctx, &req)
			s.accept(ctx, req)
		}
	})
	tooLong := func() bool {
		if in.ContinueAfter > 0 {
			return workflow.GetInfo(ctx).GetCurrentHistoryLength() >= in.ContinueAfter
		}
		return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
	}
	for {
		// Continuing as new happens between turns, in one workflow task,
		// the sandbox idle and no update in flight (the waiters answered
		// first): nothing is left behind in this run.
		s.releasing = false
		if err := workflow.Await(ctx, func() bool { return s.ending || s.ready() || tooLong() && !s.sbx.Busy() }); err != nil {
			return err // cancelled: the deferred Stop cleans up
		}
		switch {
		case s.ending:
			if s.end(ctx) {
				return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			}
		case s.ready():
			next := s.queue[0]
			s.queue = s.queue[1:]
			s.woken(ctx)
			s.runTurn(ctx, next)
		default:
			s.releasing = true
			err := workflow.Await(ctx, func() bool {
				return s.ending || s.ready() || workflow.AllHandlersFinished(ctx) && !s.sbx.Busy()
			})
			if err != nil {
				return err
			}
			if s.ending || s.ready() {
				continue
			}
			// Messages signalled in this very task are carried too.
			for {
				var req SendRequest
				if !signals.ReceiveAsync(&req) {
					break
				}
				s.accept(ctx, req)
			}
			next := in
			next.Fork = nil
			next.Carried = &Carried{Sandbox: s.sbx.Carry(), Conversation: s.segs, Unsent: s.unsent,
				Queue: s.queue, NextTurn: s.nextTurn, Turn: s.turn, Turns: s.turns, Usage: s.usage, Runs: s.runs, Version: s.version,
				Answers: s.answers, Paused: s.paused}
			return workflow.NewContinueAsNewError(ctx, WorkflowName, next)
		}
	}
}

// end ends the session as the pending EndRequest asks, and reports
// whether it did: a workspace that could not be kept fails the request,
// and the session goes on.
func (s *session) end(ctx workflow.Context) bool {
	defer func() { s.endsDone++; s.changed() }()
	if !s.destroy {
		id, err := s.sbx.Snapshot(ctx)
		if err != nil {
			s.endErr = fmt.Errorf("keep the workspace: %w (end with destroy to drop it)", err)
			s.ending = false
			return false
		}
		s.endResult.Snapshot = id
	}
	if err := s.sbx.Stop(ctx); err != nil {
		s.endErr = err
	}
	s.ended = true
	return true
}

// accept queues a valid message for a turn and returns its number.
func (s *session) accept(ctx workflow.Context, req SendRequest) int {
	err := checkMessage(req.Message)
	// A signalled message past the queue's bounds is dropped too (an
	// Update's validator refused it already). Histories from before
	// the bounds have no marker here, and queued what came.
	if err == nil && workflow.GetVersion(ctx, "bound-queue", workflow.DefaultVersion, 1) == 1 {
		err = s.roomFor(req.Message)
	}
	if err != nil || s.ending || s.ended {
		workflow.GetLogger(ctx).Warn("message refused", "error", err, "ending", s.ending)
		return 0
	}
	n := s.nextTurn
	s.nextTurn++
	s.queue = append(s.queue, queued{Turn: n, Message: req.Message})
	s.changed()
	return n
}

// roomFor refuses a message past the queue's bounds: queued messages
// are carried across continue-as-new.
func (s *session) roomFor(msg string) error {
	size := len(msg)
	for _, q := range s.queue {
		size += len(q.Message)
	}
	if len(s.queue) >= maxQueued || size > maxQueuedBytes {
		return fmt.Errorf("%w: %d messages wait for their turn already; send this one once a turn has finished",
			errdefs.ErrBadInput, len(s.queue))
	}
	return nil
}

func (s *session) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryState, s.state); err != nil {
		return err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateSend,
		func(ctx workflow.Context, req SendRequest) (SendResult, error) {
			return SendResult{Turn: s.accept(ctx, req)}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req SendRequest) error {
			if err := s.open(); err != nil {
				return err
			}
			if err := checkMessage(req.Message); err != nil {
				return sandbox.Failure(err)
			}
			return sandbox.Failure(s.roomFor(req.Message))
		}})
	if err != nil {
		return err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateApprove,
		func(ctx workflow.Context, req ApproveRequest) error {
			s.decisions[req.CallID] = req.Approve
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req ApproveRequest) error {
			if !s.awaiting[req.CallID] {
				return sandbox.Failure(fmt.Errorf("%w: no tool call %q awaits approval", errdefs.ErrBadInput, req.CallID))
			}
			return nil
		}})
	if err != nil {
		return err
	}
	err = workflow.SetUpdateHandler(ctx, UpdateWait, func(ctx workflow.Context, req WaitRequest) (State, error) {
		err := workflow.Await(ctx, func() bool { return s.version > req.After || s.releasing || s.ended })
		if err != nil {
			return State{}, err
		}
		return s.state()
	})
	if err != nil {
		return err
	}
	if err := s.registerManaged(ctx); err != nil {
		return err
	}
	if err := s.registerOps(ctx); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnd,
		func(ctx workflow.Context, req EndRequest) (res EndResult, err error) {
			if a := s.answered(ctx); a != nil {
				_, err := a.replay(&res)
				return res, err
			}
			defer func() { s.remember(ctx, res, "", err) }()
			s.ending, s.destroy, s.endErr = true, req.Destroy, nil
			for id := range s.awaiting {
				s.decisions[id] = false // a call awaiting approval is denied
			}
			done := s.endsDone + 1
			if err := workflow.Await(ctx, func() bool { return s.endsDone >= done }); err != nil {
				return EndResult{}, err
			}
			return s.endResult, sandbox.Failure(s.endErr)
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, req EndRequest) error { return s.openOrAnswered(ctx) }})
}

// changed notes a change of the state, for UpdateWait.
func (s *session) changed() { s.version++ }

// open refuses operations on a session that ends.
func (s *session) open() error {
	if s.ending || s.ended {
		return sandbox.Failure(fmt.Errorf("%w: the session has ended", errdefs.ErrNotFound))
	}
	return nil
}

func (s *session) state() (State, error) {
	st := State{Status: StatusIdle, Turn: s.turn, Turns: s.turns, Queued: len(s.queue), Usage: s.usage,
		Messages: s.messages + len(s.unsent), Ended: s.ended, Runs: s.runs, Version: s.version}
	if s.inTurn {
		st.Status = s.turn.Status
	}
	if s.sbx != nil {
		st.Sandbox = s.sbx.Status()
	}
	return st, nil
}

// runTurn answers one message: model calls and tool calls until the
// model answers without tool calls, or MaxSteps.
func (s *session) runTurn(ctx workflow.Context, q queued) {
	s.inTurn = true
	defer func() { s.inTurn = false }()
	s.turn = TurnState{Number: q.Turn, Status: StatusThinking, Message: q.Message}
	s.changed()
	// A command's output keys go to the call that runs it, for front
	// ends to follow it live; the call is found by its id, the state's
	// calls being trimmed as they grow.
	ws := tools.OnSandbox(ctx, s.sbx, sandbox.OnStart(func(id string) {
		for i := range s.turn.Calls {
			if c := &s.turn.Calls[i]; c.ID == s.running {
				sb := s.sbx.ID()
				c.Stdout, c.Stderr = transfer.OutputKey(sb, id, "stdout"), transfer.OutputKey(sb, id, "stderr")
				s.changed()
			}
		}
	}))
	// Shell's tty is offered, and honoured, from its version on: a
	// history from before it replays as it ran, any tty a model sent
	// then ignored.
	tv := tools.VersionBase
	if workflow.GetVersion(ctx, "shell-tty", workflow.DefaultVersion, 1) == 1 {
		tv = tools.VersionShellTTY
	}
	pending := s.unsent
	if s.messages == 0 && len(pending) == 0 {
		pending = append(pending, chat.Message{Role: chat.RoleSystem, Content: tools.Instructions(ws, s.in.SystemPrompt)})
	}
	pending = append(pending, chat.Message{Role: chat.RoleUser, Content: q.Message})
	s.unsent = nil

	for step := 1; ; step++ {
		if s.ending {
			s.finish(StatusFailed, "", "Ended: the session ended during the turn", pending)
			return
		}
		if step > s.in.MaxSteps {
			s.finish(StatusFailed, "", fmt.Sprintf("StepLimit: the turn stopped after %d model calls; send a message to go on", s.in.MaxSteps), pending)
			return
		}
		s.turn.Status, s.turn.Tool, s.turn.Steps = StatusThinking, "", step
		s.turn.Stream = transfer.Outputs + "agent/" + s.conv + fmt.Sprintf("/turn-%d-step-%d", q.Turn, step)
		s.changed()
		resp, err := s.complete(ctx, chat.Request{Conversation: s.conv, Segments: s.segs, New: pending,
			Tools: tools.DefinitionsAt(tv), Stream: s.turn.Stream})
		if err != nil {
			s.finish(StatusFailed, "", oneLine(err, s.in.ModelQueue), pending)
			return
		}
		s.segs, s.messages, pending = resp.Conversation, s.messages+len(pending)+1, nil
		s.turn.Usage.Add(resp.Usage)
		s.usage.Add(resp.Usage)
		if len(resp.Message.ToolCalls) == 0 {
			s.turn.AnswerStored = resp.Text
			s.finish(StatusDone, answerOf(resp), "", nil)
			return
		}
		for i, call := range resp.Message.ToolCalls {
			said := ""
			if i == 0 {
				said = resp.Message.Content
			}
			var stored *chat.Stored
			if i < len(resp.Arguments) && resp.Arguments[i].Key != "" {
				stored = &resp.Arguments[i]
			}
			pending = append(pending, s.runTool(ctx, ws, tv, call, said, stored))
		}
	}
}

// finish ends the turn; unsent are the messages the conversation has not
// stored yet, sent with the next turn's.
func (s *session) finish(status, answer, failure string, unsent []chat.Message) {
	s.turn.Status, s.turn.Tool, s.turn.Answer, s.turn.Error = status, "", answer, cut(failure, maxStateError)
	s.changed()
	s.unsent = trimUnsent(unsent)
	kept := s.turn
	kept.Calls = nil
	kept.Message = cut(kept.Message, maxStateOutput)
	s.turns = append(s.turns, kept)
	if len(s.turns) > keptTurns {
		s.turns = s.turns[len(s.turns)-keptTurns:]
	}
}

// complete calls the model activity.
func (s *session) complete(ctx workflow.Context, req chat.Request) (chat.Response, error) {
	opts := model.ActivityOptions()
	opts.TaskQueue = s.in.ModelQueue
	opts.ScheduleToStartTimeout = modelScheduleTimeout
	if s.in.ModelHeartbeatTimeout > 0 {
		opts.HeartbeatTimeout = s.in.ModelHeartbeatTimeout
	}
	var resp chat.Response
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), model.ActivityName, req).Get(ctx, &resp)
	return resp, err
}

// runTool runs one tool call in the sandbox, after its approval when
// approvals are on, and returns the tool message answering it. said is
// what the model said before it, for the state to show.
func (s *session) runTool(ctx workflow.Context, ws tools.Workspace, tv tools.Version, call chat.ToolCall, said string, stored *chat.Stored) chat.Message {
	args := call.Arguments
	if len(args) > chat.MaxInlineArguments {
		args = cut(args, chat.MaxInlineArguments)
	}
	s.turn.Calls = append(s.turn.Calls, CallState{ID: call.ID, Name: call.Name, Arguments: args, ArgumentsStored: stored,
		Status: StatusRunning, Said: cut(strings.TrimSpace(said), maxStateOutput)})
	if len(s.turn.Calls) > maxStateCalls {
		s.turn.Calls = s.turn.Calls[len(s.turn.Calls)-maxStateCalls:]
	}
	cs := &s.turn.Calls[len(s.turn.Calls)-1]
	s.turn.Tool = call.Name
	var res tools.Result
	if s.in.Approvals && call.Name == tools.Shell && !s.approved(ctx, call.ID, cs) {
		res = tools.Result{Output: "denied: the user did not allow this command, and it was not run", Failed: true}
		cs.Status = StatusDenied
	} else {
		s.turn.Status, cs.Status = StatusRunning, StatusRunning
		s.changed()
		s.running = call.ID
		res = tools.RunAt(tv, ws, call)
		s.running = ""
		cs.Status = StatusDone
	}
	cs.Output, cs.Failed = cut(res.Output, maxStateOutput), res.Failed
	s.changed()
	return chat.Message{Role: chat.RoleTool, ToolCallID: call.ID, Content: res.Output}
}

// answerOf is the answer a turn's state carries: the text, or its
// start when it is stored whole, at most chat.MaxInlineText either way
// (a model activity of another version may return more).
func answerOf(resp chat.Response) string {
	text := resp.Message.Content
	if resp.Text == nil {
		return cut(text, chat.MaxInlineText)
	}
	text = head(text, chat.MaxInlineText)
	return text + fmt.Sprintf("\n[... %d more bytes]", max(resp.Text.Size-int64(len(text)), 0))
}

// trimUnsent drops the oldest of the person's messages from unsent
// past maxUnsent, all but the last: a failed turn leaves its messages
// for the next, and a model down for long would make them grow without
// end. Tool results, which answer calls stored already, and the
// system prompt are kept; they are bounded by the model's bounds.
func trimUnsent(unsent []chat.Message) []chat.Message {
	size, last := 0, -1
	for i, m := range unsent {
		size += len(m.Content)
		if m.Role == chat.RoleUser {
			last = i
		}
	}
	if size <= maxUnsent {
		return unsent
	}
	var kept []chat.Message
	for i, m := range unsent {
		if size > maxUnsent && m.Role == chat.RoleUser && i != last {
			size -= len(m.Content)
			continue
		}
		kept = append(kept, m)
	}
	return kept
}

// approved waits for the decision on a call.
func (s *session) approved(ctx workflow.Context, id string, cs *CallState) bool {
	s.turn.Status, cs.Status = StatusApproval, StatusApproval
	s.awaiting[id] = true
	s.changed()
	defer delete(s.awaiting, id)
	if s.ending {
		return false
	}
	if err := workflow.Await(ctx, func() bool { _, ok := s.decisions[id]; return ok }); err != nil {
		return false
	}
	ok := s.decisions[id]
	delete(s.decisions, id)
	return ok
}

// oneLine says why a model call failed, in one line: the error's type
// and message.
func oneLine(err error, queue string) string {
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START {
		return fmt.Sprintf("%s: no worker serves the model (task queue %s): start berth dev or a host with BERTH_MODEL set", errdefs.NoModel, queue)
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Type() + ": " + strings.Join(strings.Fields(app.Message()), " ")
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// cut keeps the start of s, at most n bytes.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	h := head(s, n)
	return h + fmt.Sprintf("\n[... %d more bytes]", len(s)-len(h))
}

// head is the start of s, at most n bytes, ending with a whole rune.
func head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// conversationName makes a workflow id one path element.
func conversationName(id string) string {
	r := strings.NewReplacer("/", "_", "\\", "_", "\x00", "_")
	name := r.Replace(id)
	if name == "." || name == ".." || name == "" {
		name = "_" + name
	}
	return name
}
