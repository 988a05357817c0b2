package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/agenttest"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/sandbox/ops"
	"github.com/berth-dev/berth/transfer"
)

func TestMain(m *testing.M) {
	linux.Main()
	code := m.Run()
	agenttest.Close()
	os.Exit(code)
}

// harness is a test's host on the package's embedded server (see
// agenttest): a real linux provider and a fake model the host's model
// activity calls.
type harness struct{ *agenttest.Harness }

func newHarness(t testing.TB) *harness { return &harness{agenttest.New(t)} }

// session is a Session workflow under test.
type session struct {
	h  *harness
	id string
}

func (h *harness) start(in agent.SessionInput) *session {
	id := fmt.Sprintf("agent-%s-%d", strings.ReplaceAll(h.T.Name(), "/", "-"), time.Now().UnixNano())
	_, err := h.C.ExecuteWorkflow(h.T.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue},
		agent.WorkflowName, in)
	if err != nil {
		h.T.Fatal(err)
	}
	s := &session{h: h, id: id}
	h.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if h.W != nil {
			_ = s.update(ctx, agent.UpdateEnd, agent.EndRequest{Destroy: true}, nil)
		}
		_ = h.C.TerminateWorkflow(ctx, id, "", "test over")
	})
	return s
}

func (s *session) update(ctx context.Context, name string, arg, result any) error {
	handle, err := s.h.C.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: s.id, UpdateName: name,
		Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return handle.Get(ctx, result)
}

// send sends a message and returns its turn's number.
func (s *session) send(msg string) int {
	s.h.T.Helper()
	var res agent.SendResult
	if err := s.update(s.h.T.Context(), agent.UpdateSend, agent.SendRequest{Message: msg}, &res); err != nil {
		s.h.T.Fatalf("send %q: %v", msg, err)
	}
	return res.Turn
}

func (s *session) state() agent.State {
	s.h.T.Helper()
	st, err := s.tryState()
	if err != nil {
		s.h.T.Fatal(err)
	}
	return st
}

func (s *session) tryState() (agent.State, error) {
	var st agent.State
	v, err := s.h.C.QueryWorkflow(s.h.T.Context(), s.id, "", agent.QueryState)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// waitFor waits until the state satisfies cond and returns it. A query
// may fail while a worker restarts: it is asked again.
func (s *session) waitFor(what string, cond func(agent.State) bool) agent.State {
	s.h.T.Helper()
	var st agent.State
	testkit.Eventually(s.h.T, what, 2*time.Minute, func() bool {
		var err error
		st, err = s.tryState()
		return err == nil && cond(st)
	})
	return st
}

// turn waits for turn n to finish and returns it, with its tool calls
// unless the next turn has begun already.
func (s *session) turn(n int) agent.TurnState {
	s.h.T.Helper()
	var found agent.TurnState
	s.waitFor(fmt.Sprintf("turn %d to finish", n), func(st agent.State) bool {
		if st.Turn.Number == n && (st.Turn.Status == agent.StatusDone || st.Turn.Status == agent.StatusFailed) {
			found = st.Turn
			return true
		}
		for _, t := range st.Turns {
			if t.Number == n {
				found = t
				return true
			}
		}
		return false
	})
	return found
}

// file reads a file of the session's sandbox, from the provider itself.
func (s *session) file(path string) string {
	s.h.T.Helper()
	b, err := s.readFile(path)
	if err != nil {
		s.h.T.Fatalf("read %s: %v", path, err)
	}
	return b
}

// tryFile is file, or "" when the file cannot be read.
func (s *session) tryFile(path string) string {
	b, _ := s.readFile(path)
	return b
}

func (s *session) readFile(path string) (string, error) {
	ctx := s.h.T.Context()
	st, err := s.tryState()
	if err != nil {
		return "", err
	}
	sbx, err := s.h.P.Get(ctx, st.Sandbox.ID)
	if err != nil {
		return "", err
	}
	r, err := sbx.ReadFile(ctx, path)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// call is a scripted tool call.
func call(id, name string, args map[string]any) fakemodel.ToolCall {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return fakemodel.ToolCall{ID: id, Name: name, Arguments: string(b)}
}

func shell(id, command string) fakemodel.ToolCall {
	return call(id, tools.Shell, map[string]any{"command": command})
}

func toolCalls(calls ...fakemodel.ToolCall) fakemodel.Reply { return fakemodel.Reply{ToolCalls: calls} }

// roles lists a request's messages' roles.
func roles(req fakemodel.Request) string {
	var rs []string
	for _, m := range req.Messages {
		rs = append(rs, m.Role)
	}
	return strings.Join(rs, " ")
}

const (
	buggy   = "def add(a, b):\n    return a - b\n"
	test    = "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"
	runTest = "/usr/bin/python3 -B test_calc.py"
)

// A session of two turns: the model writes code and its test, runs the
// test, sees it fail and says so; asked to fix it, it edits the code,
// runs the test again and answers. The tools ran in the sandbox, and
// each model call was sent the whole conversation.
func TestSession(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(call("w1", tools.WriteFile, map[string]any{"path": "calc.py", "content": buggy}),
			call("w2", tools.WriteFile, map[string]any{"path": "test_calc.py", "content": test})),
		toolCalls(shell("r1", runTest)),
		fakemodel.Reply{Text: "The test fails: add subtracts."},
		toolCalls(call("e1", tools.EditFile, map[string]any{"path": "calc.py", "old_string": "a - b", "new_string": "a + b"})),
		toolCalls(shell("r2", runTest)),
		fakemodel.Reply{Text: "Fixed: the test passes."},
	)
	s := h.start(agent.SessionInput{SystemPrompt: "be brief"})
	if st := s.state(); st.Status != agent.StatusIdle {
		t.Errorf("a new session is %q, want idle", st.Status)
	}

	if n := s.send("write add() in calc.py with a test, and run it"); n != 1 {
		t.Fatalf("first turn numbered %d", n)
	}
	t1 := s.turn(1)
	if t1.Status != agent.StatusDone || t1.Answer != "The test fails: add subtracts." || t1.Steps != 3 {
		t.Fatalf("turn 1: %+v", t1)
	}
	if len(t1.Calls) != 3 || t1.Calls[2].Name != tools.Shell || !strings.Contains(t1.Calls[2].Output, "exit code 1") ||
		!strings.Contains(t1.Calls[2].Output, "AssertionError") {
		t.Errorf("turn 1's calls: %+v", t1.Calls)
	}
	if n := s.send("fix it"); n != 2 {
		t.Fatalf("second turn numbered %d", n)
	}
	t2 := s.turn(2)
	if t2.Status != agent.StatusDone || t2.Answer != "Fixed: the test passes." {
		t.Fatalf("turn 2: %+v", t2)
	}
	if len(t2.Calls) != 2 || !strings.Contains(t2.Calls[1].Output, "exit code 0\nok") {
		t.Errorf("turn 2's calls: %+v", t2.Calls)
	}
	// The answer streamed to the blob store, where front ends read it
	// live through the relay.
	streamed, err := transfer.ReadAt(t.Context(), h.Opts.Outputs, t2.Stream, transfer.DefaultPartSize, 0, 1<<20)
	if err != nil || string(streamed) != t2.Answer {
		t.Errorf("the answer streamed to %s: %q (%v), want %q", t2.Stream, streamed, err, t2.Answer)
	}
	if got := s.file("calc.py"); got != "def add(a, b):\n    return a + b\n" {
		t.Errorf("calc.py in the sandbox: %q", got)
	}
	if got := s.file("test_calc.py"); got != test {
		t.Errorf("test_calc.py in the sandbox: %q", got)
	}

	reqs := h.Model.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d model calls, want 6", len(reqs))
	}
	last := reqs[5]
	if want := "system user assistant tool tool assistant tool assistant user assistant tool assistant tool"; roles(last) != want {
		t.Errorf("the last call's conversation: %s, want %s", roles(last), want)
	}
	if !strings.HasPrefix(last.Messages[0].Text(), "be brief") || last.Messages[1].Text() != "write add() in calc.py with a test, and run it" ||
		!strings.Contains(last.Messages[6].Text(), "AssertionError") || last.Messages[8].Text() != "fix it" {
		t.Errorf("the last call's conversation: %+v", last.Messages)
	}
	if len(last.Tools) != len(tools.Definitions()) {
		t.Errorf("%d tools offered, want %d", len(last.Tools), len(tools.Definitions()))
	}

	st := s.state()
	if st.Status != agent.StatusIdle || len(st.Turns) != 2 || st.Messages != 14 { // the last answer too
		t.Errorf("state after two turns: status %s, %d turns, %d messages", st.Status, len(st.Turns), st.Messages)
	}
	sum := st.Turns[0].Usage
	sum.Add(st.Turns[1].Usage)
	if st.Usage != sum || st.Turns[0].Usage.TotalTokens == 0 || st.Turns[1].Usage.TotalTokens == 0 {
		t.Errorf("usage: session %+v, turns %+v and %+v", st.Usage, st.Turns[0].Usage, st.Turns[1].Usage)
	}

	var end agent.EndResult
	if err := s.update(t.Context(), agent.UpdateEnd, agent.EndRequest{Destroy: true}, &end); err != nil {
		t.Fatal(err)
	}
	if err := h.C.GetWorkflow(t.Context(), s.id, "").Get(t.Context(), nil); err != nil {
		t.Errorf("the ended session: %v", err)
	}
	if _, err := h.P.Get(t.Context(), st.Sandbox.ID); err == nil {
		t.Errorf("sandbox %s outlived its session", st.Sandbox.ID)
	}
}

// A worker stopped during a tool call, then during a model call, and
// another started each time: the turns go on where they were, and no
// command runs twice (each one appends a line to a file).
func TestSessionSurvivesWorker(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(shell("slow", "echo slow >> ran.txt && sleep 3 && echo slept")),
		fakemodel.Reply{Text: "slept"},
		toolCalls(shell("fast", "echo fast >> ran.txt")),
		fakemodel.Reply{Text: "done"}, // taken by the call the crash cuts off
		fakemodel.Reply{Text: "done"},
	)
	s := h.start(agent.SessionInput{ModelHeartbeatTimeout: 2 * time.Second})

	// Mid-tool-call: the command has started in the sandbox.
	s.send("sleep")
	s.waitFor("the slow command to run", func(st agent.State) bool { return st.Status == agent.StatusRunning })
	testkit.Eventually(t, "the slow command to start", time.Minute, func() bool {
		return strings.Contains(s.tryFile("ran.txt"), "slow")
	})
	h.StopWorker()
	h.StartWorker()
	t1 := s.turn(1)
	if t1.Status != agent.StatusDone || t1.Answer != "slept" || len(t1.Calls) != 1 || !strings.Contains(t1.Calls[0].Output, "slept") {
		t.Fatalf("turn 1 across a worker restart: %+v", t1)
	}

	// Mid-model-call: the tool call is done, the model called again.
	first, second := h.Model.Hold(), h.Model.Hold()
	s.send("append")
	<-first.Arrived()
	first.Release()
	<-second.Arrived()
	h.StopWorker()
	h.StartWorker()
	t2 := s.turn(2)
	if t2.Status != agent.StatusDone || t2.Answer != "done" {
		t.Fatalf("turn 2 across a worker restart: %+v", t2)
	}
	if got := s.file("ran.txt"); got != "slow\nfast\n" {
		t.Errorf("the commands ran: %q, want each once", got)
	}
	if n := len(h.Model.Requests()); n != 5 {
		t.Errorf("%d model calls, want 5 (one retried)", n)
	}
}

// A model server that answers 429, then 500, then succeeds: the model
// activity is retried by Temporal, and the turn answers.
func TestSessionModelRetried(t *testing.T) {
	h := newHarness(t)
	h.Model.FailNext(http.StatusTooManyRequests, 1)
	h.Model.FailNext(http.StatusInternalServerError, 1)
	h.Model.Script(fakemodel.Reply{Text: "at last"})
	s := h.start(agent.SessionInput{})
	s.send("hello")
	if t1 := s.turn(1); t1.Status != agent.StatusDone || t1.Answer != "at last" {
		t.Fatalf("turn 1: %+v", t1)
	}
	reqs := h.Model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model calls, want 3", len(reqs))
	}
	for i, r := range reqs {
		if roles(r) != "system user" || r.Messages[1].Text() != "hello" {
			t.Errorf("call %d: %s", i, roles(r))
		}
	}
}

// Without a model (a host whose model activity says none is configured)
// a turn fails at once, in one line, and the session goes on.
func TestSessionNoModel(t *testing.T) {
	h := newHarness(t)
	opts := h.Opts
	opts.Queue, opts.HostQueue, opts.Model = "nomodel", "nomodel", nil
	w, err := hostworker.StartWorker(h.C, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	s := h.start(agent.SessionInput{ModelQueue: "nomodel.model"})
	s.send("hello")
	t1 := s.turn(1)
	if t1.Status != agent.StatusFailed || !strings.HasPrefix(t1.Error, string(errdefs.NoModel)+": no model configured: set BERTH_MODEL") ||
		strings.Contains(t1.Error, "\n") {
		t.Fatalf("turn 1 without a model: %+v", t1)
	}
	if n := s.send("again"); n != 2 {
		t.Fatalf("second turn numbered %d", n)
	}
	if t2 := s.turn(2); t2.Status != agent.StatusFailed {
		t.Fatalf("turn 2: %+v", t2)
	}
}

// With approvals on, a shell call waits for the person: denied, it does
// not run and the model is told; approved, it runs.
func TestSessionApprovals(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(shell("a1", "echo one >> log.txt")),
		toolCalls(shell("a2", "echo two >> log.txt")),
		fakemodel.Reply{Text: "wrote two"},
		fakemodel.Reply{Text: "second"},
	)
	s := h.start(agent.SessionInput{Approvals: true})
	s.send("log")
	awaiting := func(id string) func(agent.State) bool {
		return func(st agent.State) bool {
			n := len(st.Turn.Calls)
			return st.Status == agent.StatusApproval && st.Turn.Tool == tools.Shell && n > 0 &&
				st.Turn.Calls[n-1].ID == id && st.Turn.Calls[n-1].Status == agent.StatusApproval
		}
	}
	s.waitFor("a1 to await approval", awaiting("a1"))
	if got := s.tryFile("log.txt"); got != "" {
		t.Fatalf("a command awaiting approval ran: %q", got)
	}
	// A message sent during a turn is accepted at once, and queued.
	if n := s.send("then this"); n != 2 {
		t.Fatalf("a message during turn 1 numbered %d", n)
	}
	if st := s.state(); st.Queued != 1 || st.Turn.Number != 1 {
		t.Errorf("state with a message queued: %+v", st)
	}
	err := s.update(t.Context(), agent.UpdateApprove, agent.ApproveRequest{CallID: "nope", Approve: true}, nil)
	if temporalerr.KindOf(err) != errdefs.BadInput {
		t.Errorf("approving a call that does not wait: %v, want BadInput", err)
	}
	if err := s.update(t.Context(), agent.UpdateApprove, agent.ApproveRequest{CallID: "a1"}, nil); err != nil {
		t.Fatal(err)
	}
	if st := s.waitFor("a2 to await approval", awaiting("a2")); st.Turn.Calls[0].Status != agent.StatusDenied ||
		!strings.HasPrefix(st.Turn.Calls[0].Output, "denied") {
		t.Errorf("a1 once denied: %+v", st.Turn.Calls[0])
	}
	if err := s.update(t.Context(), agent.UpdateApprove, agent.ApproveRequest{CallID: "a2", Approve: true}, nil); err != nil {
		t.Fatal(err)
	}
	if t1 := s.turn(1); t1.Answer != "wrote two" {
		t.Fatalf("turn 1: %+v", t1)
	}
	if got := s.file("log.txt"); got != "two\n" {
		t.Errorf("log.txt: %q, want only the approved command's line", got)
	}
	if t2 := s.turn(2); t2.Answer != "second" || t2.Message != "then this" {
		t.Errorf("the queued turn: %+v", t2)
	}
	reqs := h.Model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls", len(reqs))
	}
	denied := reqs[1].Messages[len(reqs[1].Messages)-1]
	if denied.Role != "tool" || denied.ToolCallID != "a1" || !strings.HasPrefix(denied.Text(), "denied") {
		t.Errorf("the model was told %+v, want a denial of a1", denied)
	}
	if ran := reqs[2].Messages[len(reqs[2].Messages)-1]; !strings.HasPrefix(ran.Text(), "exit code 0") {
		t.Errorf("the approved command's result: %q", ran.Text())
	}
}

// A session that continues as new between turns keeps its conversation,
// its usage and its sandbox, workspace included.
func TestSessionContinueAsNew(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(call("w", tools.WriteFile, map[string]any{"path": "note.txt", "content": "kept\n"})),
		fakemodel.Reply{Text: "written"},
		toolCalls(shell("r", "cat note.txt")),
		fakemodel.Reply{Text: "read"},
	)
	s := h.start(agent.SessionInput{ContinueAfter: 20})
	// A front end's wait in flight does not hold the run back: it is
	// answered, and asks the next run again.
	waiting, err := h.C.UpdateWorkflow(t.Context(), client.UpdateWorkflowOptions{WorkflowID: s.id, UpdateName: agent.UpdateWait,
		Args: []any{agent.WaitRequest{After: 1 << 30}}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		t.Fatal(err)
	}
	s.send("write")
	s.turn(1)
	before := s.waitFor("the session to continue as new", func(st agent.State) bool { return st.Runs == 2 })
	var answered agent.State
	if err := waiting.Get(t.Context(), &answered); err != nil || answered.Runs != 1 {
		t.Errorf("the wait in flight: %v, runs %d", err, answered.Runs)
	}
	if before.Turn.Number != 1 || before.Turn.Answer != "written" || before.Messages != 5 || before.Usage.TotalTokens == 0 {
		t.Errorf("state carried: %+v", before)
	}
	if n := s.send("read"); n != 2 {
		t.Fatalf("the turn after continue-as-new numbered %d", n)
	}
	t2 := s.turn(2)
	if t2.Answer != "read" || len(t2.Calls) != 1 || !strings.Contains(t2.Calls[0].Output, "kept") {
		t.Fatalf("turn 2: %+v", t2)
	}
	after := s.state()
	if after.Sandbox.ID != before.Sandbox.ID {
		t.Errorf("sandbox %s after continue-as-new, was %s", after.Sandbox.ID, before.Sandbox.ID)
	}
	if want := before.Usage.TotalTokens + t2.Usage.TotalTokens; after.Usage.TotalTokens != want {
		t.Errorf("session usage %d, want %d", after.Usage.TotalTokens, want)
	}
	reqs := h.Model.Requests()
	if last := reqs[len(reqs)-1]; roles(last) != "system user assistant tool assistant user assistant tool" {
		t.Errorf("the conversation after continue-as-new: %s", roles(last))
	}
}

// TestSessionOpsAfterContinueAsNew: the sandbox's commands and files
// Updates (package ops), which a person sends through the session, are
// served by the run a session continued as new into, on the workspace
// the turns made, and never enter the conversation.
func TestSessionOpsAfterContinueAsNew(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(call("w", tools.WriteFile, map[string]any{"path": "note.txt", "content": "kept\n"})),
		fakemodel.Reply{Text: "written"},
	)
	s := h.start(agent.SessionInput{ContinueAfter: 20})
	s.send("write")
	s.turn(1)
	before := s.waitFor("the session to continue as new", func(st agent.State) bool { return st.Runs == 2 })
	ctx := t.Context()
	var out ops.RunOutput
	if err := s.update(ctx, ops.UpdateExec, ops.ExecRequest{Shell: "cat note.txt; echo mine > mine.txt"}, &out); err != nil {
		t.Fatalf("exec after continue-as-new: %v", err)
	}
	if string(out.Stdout.Inline) != "kept\n" || out.ExitCode != 0 || out.Sandbox != before.Sandbox.ID {
		t.Errorf("exec after continue-as-new: %+v", out)
	}
	var file transfer.Output
	if err := s.update(ctx, ops.UpdateReadFile, ops.PathRequest{Path: "mine.txt"}, &file); err != nil || string(file.Inline) != "mine\n" {
		t.Errorf("read_file after continue-as-new: %q, %v", file.Inline, err)
	}
	var app *temporal.ApplicationError
	if err := s.update(ctx, ops.UpdateReadFile, ops.PathRequest{Path: "../etc/passwd"}, &file); !errors.As(err, &app) || app.Type() != string(errdefs.BadInput) {
		t.Errorf("read_file out of the workspace: %v, want BadInput", err)
	}
	v, err := h.C.QueryWorkflow(ctx, s.id, "", ops.QuerySandbox)
	var st ops.Status
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil || st.ID != before.Sandbox.ID || st.Commands != 1 { // the exec: a file tool runs no command
		t.Errorf("the sandbox query after continue-as-new: %+v, %v", st, err)
	}
	// The operations lengthen history too: the session may have
	// continued as new again meanwhile.
	if after := s.state(); after.Messages != before.Messages || after.Runs < 2 {
		t.Errorf("after the person's operations: %d messages in run %d; was %d in run 2", after.Messages, after.Runs, before.Messages)
	}
}

// Bad messages are refused before they enter history, with a typed
// error, and the session goes on serving; a message may come by Signal.
func TestSessionBadInput(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(fakemodel.Reply{Text: "hi"}, fakemodel.Reply{Text: "signalled"})
	s := h.start(agent.SessionInput{})
	for _, msg := range []string{"", " \n\t", strings.Repeat("x", agent.MaxMessage+1)} {
		err := s.update(t.Context(), agent.UpdateSend, agent.SendRequest{Message: msg}, nil)
		if temporalerr.KindOf(err) != errdefs.BadInput {
			t.Errorf("message of %d bytes: %v, want BadInput", len(msg), err)
		}
	}
	if n := s.send("hello"); n != 1 {
		t.Fatalf("the first good message's turn is %d", n)
	}
	if t1 := s.turn(1); t1.Answer != "hi" {
		t.Fatalf("turn 1: %+v", t1)
	}
	if err := h.C.SignalWorkflow(t.Context(), s.id, "", agent.SignalMessage, agent.SendRequest{Message: "by signal"}); err != nil {
		t.Fatal(err)
	}
	if t2 := s.turn(2); t2.Answer != "signalled" || t2.Message != "by signal" {
		t.Fatalf("turn 2: %+v", t2)
	}
	run, err := h.C.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue},
		agent.WorkflowName, agent.SessionInput{MaxSteps: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(t.Context(), nil); temporalerr.KindOf(err) != errdefs.BadInput {
		t.Errorf("a session of -1 steps: %v, want BadInput", err)
	}
}

// A front end follows a turn live with one berth.agent.wait after
// another: each returns as soon as the state changes, so that every
// step of the turn is seen, in order, without polling.
func TestSessionFollow(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(toolCalls(shell("s", "sleep 1 && echo awake")), fakemodel.Reply{Text: "awake"})
	s := h.start(agent.SessionInput{})
	st := s.state()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if err := s.update(ctx, agent.UpdateWait, agent.WaitRequest{After: st.Version}, &st); err == nil {
		t.Fatalf("a wait with nothing changing returned %+v", st)
	}
	var seen []string
	waits := 0
	turn := s.send("sleep")
	for st.Turn.Number != turn || st.Status != agent.StatusIdle {
		if err := s.update(t.Context(), agent.UpdateWait, agent.WaitRequest{After: st.Version}, &st); err != nil {
			t.Fatal(err)
		}
		waits++
		step := st.Status
		if st.Status == agent.StatusIdle && st.Turn.Number == turn {
			step = st.Turn.Status
		}
		if len(seen) == 0 || seen[len(seen)-1] != step {
			seen = append(seen, step)
		}
	}
	if got := strings.Join(seen, " "); !strings.HasSuffix(got, "thinking running thinking done") {
		t.Errorf("states seen: %s", got)
	}
	if waits > 12 {
		t.Errorf("%d waits for a turn of two steps: not answered on change", waits)
	}
}

// A session idle long enough hibernates its sandbox (checkpointed and
// destroyed) and costs nothing; the next message wakes it, workspace
// whole. Ended without destroy, the workspace is kept as a snapshot.
func TestSessionHibernates(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(call("w", tools.WriteFile, map[string]any{"path": "note.txt", "content": "kept\n"})),
		fakemodel.Reply{Text: "written"},
		toolCalls(shell("r", "cat note.txt")),
		fakemodel.Reply{Text: "read"},
	)
	s := h.start(agent.SessionInput{IdleTimeout: 200 * time.Millisecond, HibernateAfter: time.Second})
	s.send("write")
	s.turn(1)
	first := s.waitFor("the sandbox to hibernate", func(st agent.State) bool {
		return st.Sandbox.State == sandbox.StateHibernated
	})
	if _, err := h.P.Get(t.Context(), first.Sandbox.ID); err == nil {
		t.Errorf("hibernated sandbox %s still exists", first.Sandbox.ID)
	}
	s.send("read")
	if t2 := s.turn(2); t2.Answer != "read" || len(t2.Calls) != 1 || !strings.Contains(t2.Calls[0].Output, "kept") {
		t.Fatalf("turn 2 after hibernation: %+v", t2)
	}
	var end agent.EndResult
	if err := s.update(t.Context(), agent.UpdateEnd, agent.EndRequest{}, &end); err != nil {
		t.Fatal(err)
	}
	if end.Snapshot == "" {
		t.Error("the workspace was not kept")
	}
	if err := h.C.GetWorkflow(t.Context(), s.id, "").Get(t.Context(), nil); err != nil {
		t.Errorf("the ended session: %v", err)
	}
	if st := s.state(); !st.Ended {
		t.Errorf("state after end: %+v", st)
	}
	if err := s.update(t.Context(), agent.UpdateSend, agent.SendRequest{Message: "more"}, nil); err == nil {
		t.Error("an ended session accepted a message")
	}
}

// A turn stops after MaxSteps model calls; the tool results the model
// has not seen go with the next turn's message, so that the
// conversation stays one the API accepts (the fake model refuses tool
// calls left unanswered).
func TestSessionStepLimit(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(toolCalls(shell("a", "echo a")), toolCalls(shell("b", "echo b")), fakemodel.Reply{Text: "ok"})
	s := h.start(agent.SessionInput{MaxSteps: 2})
	s.send("loop")
	t1 := s.turn(1)
	if t1.Status != agent.StatusFailed || !strings.HasPrefix(t1.Error, "StepLimit: ") || len(t1.Calls) != 2 {
		t.Fatalf("turn 1: %+v", t1)
	}
	s.send("go on")
	if t2 := s.turn(2); t2.Status != agent.StatusDone || t2.Answer != "ok" {
		t.Fatalf("turn 2: %+v", t2)
	}
	reqs := h.Model.Requests()
	if got := roles(reqs[2]); got != "system user assistant tool assistant tool user" {
		t.Errorf("the conversation after the step limit: %s", got)
	}
	if st := s.state(); st.Messages != 8 {
		t.Errorf("%d messages, want 8", st.Messages)
	}
}

// berth's host (hostworker.StartHost, as berth dev and berth worker run
// it) starts whatever its model does, says in one line what is wrong
// with it, and serves sessions with it.
func TestSessionOnHost(t *testing.T) {
	h := newHarness(t)
	h.StopWorker() // the host below serves the default queues instead
	data, err := os.MkdirTemp("", "bh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) })
	cfg := hostworker.HostConfig{DataDir: data, Providers: []string{"linux"},
		ProviderConfig: map[string]provider.Config{"linux": {"pool": "-1"}},
		Queue:          sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue}
	for _, bad := range []struct {
		cfg  model.Config
		says string
	}{
		{model.Config{BaseURL: h.Model.URL, APIKey: "sk-wrong", Model: fakemodel.Model}, "401"},
		{model.Config{BaseURL: h.Model.URL, APIKey: fakemodel.Key, Model: "no-such-model"}, `does not serve model "no-such-model"`},
		{model.Config{BaseURL: "http://127.0.0.1:1/v1", Model: fakemodel.Model}, "unreachable"},
	} {
		cfg.Model = &bad.cfg
		host, err := hostworker.StartHost(t.Context(), h.C, cfg)
		if err != nil {
			t.Errorf("a host with %v did not start: %v; the model is optional", bad.cfg, err)
			continue
		}
		st := host.ModelStatus(t.Context())
		host.Close()
		if st.State != model.Unavailable || strings.Contains(st.Reason, "\n") || !strings.Contains(st.Reason, bad.says) {
			t.Errorf("a host with %v: model %s, %q; want unavailable, one line saying %s", bad.cfg, st.State, st.Reason, bad.says)
		}
	}
	cfg.Model = &model.Config{BaseURL: h.Model.URL, APIKey: fakemodel.Key, Model: fakemodel.Model}
	host, err := hostworker.StartHost(t.Context(), h.C, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	h.Model.Script(toolCalls(shell("s", "echo on the host")), fakemodel.Reply{Text: "done"})
	s := h.start(agent.SessionInput{})
	s.send("hello")
	if t1 := s.turn(1); t1.Answer != "done" || len(t1.Calls) != 1 || !strings.Contains(t1.Calls[0].Output, "on the host") {
		t.Fatalf("turn 1 on the host: %+v", t1)
	}
	if err := s.update(t.Context(), agent.UpdateEnd, agent.EndRequest{Destroy: true}, nil); err != nil {
		t.Fatal(err)
	}
}

// A shell call's output can be followed while it runs: the state names
// its streams' keys, and the session's workflow relays them.
func TestSessionLiveOutput(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(fakemodel.Reply{Text: "Running it.", ToolCalls: []fakemodel.ToolCall{shell("live", "echo first; sleep 3; echo second")}},
		fakemodel.Reply{Text: "done"})
	s := h.start(agent.SessionInput{})
	turn := s.send("run it")
	st := s.waitFor("the call running, with its keys", func(st agent.State) bool {
		return len(st.Turn.Calls) == 1 && st.Turn.Calls[0].Stdout != ""
	})
	key := st.Turn.Calls[0].Stdout
	var got []byte
	testkit.Eventually(t, "its first line, live", time.Minute, func() bool {
		v, err := h.C.QueryWorkflow(t.Context(), s.id, "", transfer.QueryRead, transfer.ReadRequest{Key: key})
		return err == nil && v.Get(&got) == nil && string(got) == "first\n"
	})
	if st := s.state(); st.Turn.Calls[0].Status != agent.StatusRunning {
		t.Errorf("the output was read after the command ended: %+v", st.Turn.Calls[0])
	}
	if t := s.turn(turn); len(t.Calls) != 1 || !strings.Contains(t.Calls[0].Output, "first\nsecond\n") || t.Calls[0].Said != "Running it." {
		h.T.Errorf("the call's output, and what the model said before it: %+v", t.Calls)
	}
}
