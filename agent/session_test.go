package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

// harness is an embedded server, a real host with the linux provider,
// and a fake model the host's model activity calls.
type harness struct {
	t     testing.TB
	c     client.Client
	p     *linux.Provider
	model *fakemodel.Server
	opts  hostworker.Options
	w     *hostworker.Worker
}

func newHarness(t testing.TB) *harness {
	logger := slog.New(slog.DiscardHandler)
	srv, err := devserver.Start(t.Context(), devserver.Options{DataDir: t.TempDir(), Address: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	copts := srv.ClientOptions()
	copts.Logger = hostworker.Logger(logger)
	c, err := client.Dial(copts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h := &harness{t: t, c: c, p: berthtest.Provider(t), model: fakemodel.New(t)}
	h.opts = hostworker.Options{
		Providers: map[string]provider.Provider{"linux": h.p}, Outputs: berthtest.Bucket(t),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Model: &model.Config{BaseURL: h.model.URL, APIKey: fakemodel.Key, Model: fakemodel.Model,
			HeartbeatEvery: 200 * time.Millisecond},
	}
	h.startWorker()
	t.Cleanup(func() {
		if h.w != nil {
			h.w.Stop()
		}
	})
	return h
}

func (h *harness) startWorker() {
	w, err := hostworker.Start(h.c, h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.w = w
}

func (h *harness) stopWorker() {
	h.w.Stop()
	h.w = nil
}

// session is a Session workflow under test.
type session struct {
	h  *harness
	id string
}

func (h *harness) start(in agent.SessionInput) *session {
	id := fmt.Sprintf("agent-%s-%d", strings.ReplaceAll(h.t.Name(), "/", "-"), time.Now().UnixNano())
	_, err := h.c.ExecuteWorkflow(h.t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue},
		agent.WorkflowName, in)
	if err != nil {
		h.t.Fatal(err)
	}
	s := &session{h: h, id: id}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if h.w != nil {
			_ = s.update(ctx, agent.UpdateEnd, agent.EndRequest{Destroy: true}, nil)
		}
		_ = h.c.TerminateWorkflow(ctx, id, "", "test over")
	})
	return s
}

func (s *session) update(ctx context.Context, name string, arg, result any) error {
	handle, err := s.h.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: s.id, UpdateName: name,
		Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return handle.Get(ctx, result)
}

// send sends a message and returns its turn's number.
func (s *session) send(msg string) int {
	s.h.t.Helper()
	var res agent.SendResult
	if err := s.update(s.h.t.Context(), agent.UpdateSend, agent.SendRequest{Message: msg}, &res); err != nil {
		s.h.t.Fatalf("send %q: %v", msg, err)
	}
	return res.Turn
}

func (s *session) state() agent.State {
	s.h.t.Helper()
	v, err := s.h.c.QueryWorkflow(s.h.t.Context(), s.id, "", agent.QueryState)
	if err != nil {
		s.h.t.Fatal(err)
	}
	var st agent.State
	if err := v.Get(&st); err != nil {
		s.h.t.Fatal(err)
	}
	return st
}

// waitFor waits until the state satisfies cond and returns it.
func (s *session) waitFor(what string, cond func(agent.State) bool) agent.State {
	s.h.t.Helper()
	var st agent.State
	testkit.Eventually(s.h.t, what, 2*time.Minute, func() bool {
		st = s.state()
		return cond(st)
	})
	return st
}

// turn waits for turn n to finish and returns it with its tool calls.
func (s *session) turn(n int) agent.TurnState {
	s.h.t.Helper()
	st := s.waitFor(fmt.Sprintf("turn %d to finish", n), func(st agent.State) bool {
		return st.Turn.Number == n && (st.Turn.Status == agent.StatusDone || st.Turn.Status == agent.StatusFailed)
	})
	return st.Turn
}

// file reads a file of the session's sandbox, from the provider itself.
func (s *session) file(path string) string {
	s.h.t.Helper()
	ctx := s.h.t.Context()
	sbx, err := s.h.p.Get(ctx, s.state().Sandbox.ID)
	if err != nil {
		s.h.t.Fatal(err)
	}
	r, err := sbx.ReadFile(ctx, path)
	if err != nil {
		s.h.t.Fatalf("read %s: %v", path, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		s.h.t.Fatal(err)
	}
	return string(b)
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
	h.model.Script(
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
	if got := s.file("calc.py"); got != "def add(a, b):\n    return a + b\n" {
		t.Errorf("calc.py in the sandbox: %q", got)
	}
	if got := s.file("test_calc.py"); got != test {
		t.Errorf("test_calc.py in the sandbox: %q", got)
	}

	reqs := h.model.Requests()
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
	if err := h.c.GetWorkflow(t.Context(), s.id, "").Get(t.Context(), nil); err != nil {
		t.Errorf("the ended session: %v", err)
	}
	if _, err := h.p.Get(t.Context(), st.Sandbox.ID); err == nil {
		t.Errorf("sandbox %s outlived its session", st.Sandbox.ID)
	}
}
