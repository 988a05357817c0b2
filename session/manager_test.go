package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/internal/agenttest"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/session/calls"
)

func TestMain(m *testing.M) {
	linux.Main()
	code := m.Run()
	agenttest.Close()
	os.Exit(code)
}

// manager is a Manager workflow under test, on a host of the test's.
type manager struct {
	t  *testing.T
	h  *agenttest.Harness
	id string
}

func newManager(t *testing.T, in session.ManagerInput) *manager {
	h := agenttest.New(t)
	m := &manager{t: t, h: h, id: fmt.Sprintf("mgr-%s-%d", t.Name(), time.Now().UnixNano())}
	if _, err := h.C.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: m.id, TaskQueue: sandbox.DefaultQueue},
		session.WorkflowName, in); err != nil {
		t.Fatal(err)
	}
	// Whatever the test left running is terminated, before the host
	// stops (cleanups run last first); berthtest's provider cleanup
	// destroys the sandboxes.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := 1; i <= 20; i++ {
			_ = h.C.TerminateWorkflow(ctx, session.WorkflowID(m.id, fmt.Sprintf("s%d", i)), "", "test over")
		}
		_ = h.C.TerminateWorkflow(ctx, m.id, "", "test over")
	})
	return m
}

func (m *manager) update(name string, arg, result any) error {
	ctx, cancel := context.WithTimeout(m.t.Context(), 2*time.Minute)
	defer cancel()
	return updateWorkflow(ctx, m.h.C, m.id, name, arg, result)
}

func updateWorkflow(ctx context.Context, c client.Client, id, name string, arg, result any) error {
	opts := client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: name, WaitForStage: client.WorkflowUpdateStageCompleted}
	if arg != nil {
		opts.Args = []any{arg}
	}
	handle, err := c.UpdateWorkflow(ctx, opts)
	if err != nil {
		return err
	}
	return handle.Get(ctx, result)
}

// must runs an Update that must succeed.
func (m *manager) must(name string, arg, result any) {
	m.t.Helper()
	if err := m.update(name, arg, result); err != nil {
		m.t.Fatalf("%s %+v: %s", name, arg, temporalerr.OneLine(err))
	}
}

func (m *manager) create(req session.CreateRequest) session.Info {
	m.t.Helper()
	var info session.Info
	m.must(session.UpdateCreate, req, &info)
	return info
}

func (m *manager) list(all bool) []session.Info {
	m.t.Helper()
	var infos []session.Info
	m.must(session.UpdateList, session.ListRequest{All: all}, &infos)
	return infos
}

func (m *manager) query() []session.Info {
	m.t.Helper()
	v, err := m.h.C.QueryWorkflow(m.t.Context(), m.id, "", session.QuerySessions)
	var infos []session.Info
	if err == nil {
		err = v.Get(&infos)
	}
	if err != nil {
		m.t.Fatal(err)
	}
	return infos
}

func find(infos []session.Info, id string) (session.Info, bool) {
	for _, i := range infos {
		if i.ID == id {
			return i, true
		}
	}
	return session.Info{}, false
}

// fails checks that an Update fails with an error of kind, in one line.
func (m *manager) fails(kind errdefs.Kind, name string, arg any) {
	m.t.Helper()
	err := m.update(name, arg, nil)
	m.t.Logf("%s: %s", name, temporalerr.OneLine(err))
	if temporalerr.KindOf(err) != kind || strings.Contains(temporalerr.OneLine(err), "\n") {
		m.t.Errorf("%s %+v: %v, want one line of %s", name, arg, err, kind)
	}
}

// send sends a session a message and waits for its turn's answer.
func (m *manager) send(info session.Info, msg string) agent.TurnState {
	m.t.Helper()
	var res agent.SendResult
	if err := updateWorkflow(m.t.Context(), m.h.C, info.WorkflowID, agent.UpdateSend, agent.SendRequest{Message: msg}, &res); err != nil {
		m.t.Fatalf("send %q to %s: %v", msg, info.ID, err)
	}
	var turn agent.TurnState
	testkit.Eventually(m.t, fmt.Sprintf("turn %d of %s", res.Turn, info.ID), 2*time.Minute, func() bool {
		st, err := m.state(info)
		if err == nil && st.Turn.Number == res.Turn && (st.Turn.Status == agent.StatusDone || st.Turn.Status == agent.StatusFailed) {
			turn = st.Turn
			return true
		}
		return false
	})
	return turn
}

func (m *manager) state(info session.Info) (agent.State, error) {
	var st agent.State
	v, err := m.h.C.QueryWorkflow(m.t.Context(), info.WorkflowID, "", agent.QueryState)
	if err == nil {
		err = v.Get(&st)
	}
	return st, err
}

// file reads a file of a session's sandbox, from the provider.
func (m *manager) file(info session.Info, path string) string {
	m.t.Helper()
	ctx := m.t.Context()
	st, err := m.state(info)
	if err != nil {
		m.t.Fatal(err)
	}
	sbx, err := m.h.Opts.Providers[st.Sandbox.Provider].Get(ctx, st.Sandbox.ID)
	if err != nil {
		m.t.Fatalf("the sandbox of %s: %v", info.ID, err)
	}
	r, err := sbx.ReadFile(ctx, path)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	return string(b)
}

// blobs lists the keys under prefix of the host's output store.
func (m *manager) blobs(prefix string) []string {
	m.t.Helper()
	var keys []string
	it := m.h.Opts.Outputs.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(m.t.Context())
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			m.t.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
}

// closed says whether a workflow has closed.
func (m *manager) closed(id string) bool {
	desc, err := m.h.C.DescribeWorkflowExecution(m.t.Context(), id, "")
	return err == nil && desc.GetWorkflowExecutionInfo().GetStatus().String() != "Running"
}

func write(id, path, content string) fakemodel.Reply {
	b, _ := json.Marshal(map[string]any{"path": path, "content": content})
	return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{ID: id, Name: tools.WriteFile, Arguments: string(b)}}}
}

func roles(req fakemodel.Request) string {
	var rs []string
	for _, msg := range req.Messages {
		rs = append(rs, msg.Role)
	}
	return strings.Join(rs, " ")
}

// The signal names and shape package agent sends are the manager's.
func TestSignalsMatch(t *testing.T) {
	if agent.SignalManagerEnded != session.SignalEnded || agent.SignalManagerStarted != session.SignalStarted ||
		agent.SignalManagerActive != session.SignalActive {
		t.Fatalf("agent signals %s and %s, the manager hears %s and %s", agent.SignalManagerEnded,
			agent.SignalManagerStarted, session.SignalEnded, session.SignalStarted)
	}
	b, err := json.Marshal(agent.ManagerSignal{WorkflowID: "m/s1", Error: "Canceled: x"})
	if err != nil {
		t.Fatal(err)
	}
	var got session.Ended
	if err := json.Unmarshal(b, &got); err != nil || got != (session.Ended{WorkflowID: "m/s1", Error: "Canceled: x"}) {
		t.Errorf("agent.ManagerSignal %s reads as %+v (%v)", b, got, err)
	}
}

// A session is created, talked to, listed and renamed; bad input fails
// at once with a typed one-line error, and the manager goes on serving.
func TestCreateListRename(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.Model.Script(write("w", "note.txt", "hello\n"), fakemodel.Reply{Text: "written"})
	s1 := m.create(session.CreateRequest{Title: "first"})
	if s1.ID != "s1" || s1.WorkflowID != session.WorkflowID(m.id, "s1") || s1.Status != session.StatusActive ||
		s1.Title != "first" || s1.Provider != "linux" || s1.Created.IsZero() {
		t.Fatalf("created %+v", s1)
	}
	if turn := m.send(s1, "write a note"); turn.Answer != "written" {
		t.Fatalf("turn 1: %+v", turn)
	}
	if got := m.file(s1, "note.txt"); got != "hello\n" {
		t.Errorf("note.txt: %q", got)
	}
	s2 := m.create(session.CreateRequest{})
	if s2.ID != "s2" || s2.Title != "s2" {
		t.Errorf("second session %+v", s2)
	}
	listed := m.list(false)
	if len(listed) != 2 || listed[0].ID != "s1" || listed[1].ID != "s2" || listed[0].Status != session.StatusActive {
		t.Errorf("listed %+v", listed)
	}
	if q := m.query(); len(q) != 2 || q[0] != listed[0] {
		t.Errorf("queried %+v", q)
	}

	var renamed session.Info
	m.must(session.UpdateRename, session.RenameRequest{Session: "first", Title: "the first"}, &renamed)
	if renamed.ID != "s1" || renamed.Title != "the first" {
		t.Errorf("renamed %+v", renamed)
	}
	// By ID, or by title.
	m.must(session.UpdateRename, session.RenameRequest{Session: "s2", Title: "twin"}, nil)
	m.must(session.UpdateRename, session.RenameRequest{Session: "the first", Title: "twin"}, nil)
	if q := m.query(); q[0].Title != "twin" || q[1].Title != "twin" {
		t.Errorf("after renames: %+v", q)
	}

	m.fails(errdefs.NotFound, session.UpdateRename, session.RenameRequest{Session: "s9", Title: "x"})
	m.fails(errdefs.NotFound, session.UpdatePause, session.Ref{Session: "nobody"})
	m.fails(errdefs.BadInput, session.UpdatePause, session.Ref{Session: "twin"}) // two have it
	m.fails(errdefs.BadInput, session.UpdateRename, session.RenameRequest{Session: "s1", Title: ""})
	m.fails(errdefs.BadInput, session.UpdateRename, session.RenameRequest{Session: "s1", Title: "two\nlines"})
	m.fails(errdefs.BadInput, session.UpdateRename, session.RenameRequest{Session: "s1", Title: "s2"})
	m.fails(errdefs.BadInput, session.UpdateCreate, session.CreateRequest{Title: strings.Repeat("x", session.MaxTitle+1)})
	m.fails(errdefs.BadInput, session.UpdateFork, session.ForkRequest{Session: ""})
	m.fails(errdefs.BadInput, session.UpdateSwitch, session.SwitchRequest{Session: "s1"})
	// Refused before history: no session was made for them.
	if s3 := m.create(session.CreateRequest{Title: "third"}); s3.ID != "s3" {
		t.Errorf("after bad input, a session is %+v", s3)
	}
	// A provider no host serves fails the create, and leaves nothing.
	m.fails(errdefs.BadInput, session.UpdateCreate, session.CreateRequest{Provider: "nosuch"})
	if q := m.query(); len(q) != 3 {
		t.Errorf("after a failed create: %+v", q)
	}
}

// A fork has its source's conversation and a copy of its workspace; the
// source goes on unaffected, and the fork outlives its destroyed source.
func TestForkDestroy(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.Model.Script(
		write("w1", "note.txt", "hello\n"), fakemodel.Reply{Text: "written"}, // s1, turn 1
		write("w2", "note.txt", "forked\n"), fakemodel.Reply{Text: "changed in the fork"}, // s2
		fakemodel.Reply{Text: "the source"}, // s1, turn 2
		fakemodel.Reply{Text: "still here"}, // s2, after s1 is destroyed
	)
	s1 := m.create(session.CreateRequest{Title: "source"})
	m.send(s1, "write a note")
	var s2 session.Info
	m.must(session.UpdateFork, session.ForkRequest{Session: "source", Title: "fork"}, &s2)
	if s2.ID != "s2" || s2.ForkOf != "s1" || s2.Title != "fork" || s2.Status != session.StatusActive {
		t.Fatalf("forked %+v", s2)
	}
	if got := m.file(s2, "note.txt"); got != "hello\n" {
		t.Errorf("the fork's note.txt: %q", got)
	}
	before := len(m.h.Model.Requests())
	turn := m.send(s2, "change it")
	if turn.Number != 2 || turn.Answer != "changed in the fork" {
		t.Fatalf("the fork's turn: %+v", turn)
	}
	first := m.h.Model.Requests()[before]
	if got := roles(first); got != "system user assistant tool assistant user" ||
		first.Messages[1].Text() != "write a note" || first.Messages[5].Text() != "change it" {
		t.Errorf("the fork's first model call: %s %+v", got, first.Messages)
	}
	if got := m.file(s2, "note.txt"); got != "forked\n" {
		t.Errorf("the fork's note.txt after its turn: %q", got)
	}
	if got := m.file(s1, "note.txt"); got != "hello\n" {
		t.Errorf("the source's note.txt after the fork's turn: %q", got)
	}
	if turn := m.send(s1, "and you?"); turn.Answer != "the source" {
		t.Errorf("the source's turn: %+v", turn)
	}
	srcConv, forkConv := agent.ConversationPrefix(s1.WorkflowID), agent.ConversationPrefix(s2.WorkflowID)
	if len(m.blobs(srcConv)) == 0 || len(m.blobs(forkConv)) == 0 || len(m.blobs(agent.StreamPrefix(s1.WorkflowID))) == 0 {
		t.Fatalf("conversations: %v, %v", m.blobs(srcConv), m.blobs(forkConv))
	}

	// A fork whose session cannot start (no host serves its provider)
	// leaves no entry, no snapshot and no conversation; its number is
	// not reused.
	m.fails(errdefs.BadInput, session.UpdateFork, session.ForkRequest{Session: "s1", Provider: "nosuch"})
	failed := session.WorkflowID(m.id, "s3")
	if _, ok := find(m.query(), "s3"); ok {
		t.Error("a fork that failed to start is listed")
	}
	snaps, err := m.h.Opts.Snapshots.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, snap := range snaps {
		if snap.Labels[sandbox.LabelWorkflowID] == failed {
			t.Errorf("the failed fork's snapshot %s is left", snap.ID)
		}
	}
	if left := m.blobs(agent.ConversationPrefix(failed)); len(left) != 0 {
		t.Errorf("the failed fork's conversation is left: %v", left)
	}

	var res session.DestroyResult
	m.must(session.UpdateDestroy, session.DestroyRequest{Session: "source"}, &res)
	if res.Snapshot != "" {
		t.Errorf("a destroyed workspace was kept: %s", res.Snapshot)
	}
	if _, ok := find(m.query(), "s1"); ok {
		t.Error("the destroyed session is still listed")
	}
	testkit.Eventually(t, "the source's workflow to close", time.Minute, func() bool { return m.closed(s1.WorkflowID) })
	if left := append(m.blobs(srcConv), m.blobs(agent.StreamPrefix(s1.WorkflowID))...); len(left) != 0 {
		t.Errorf("the destroyed session's blobs are left: %v", left)
	}
	if turn := m.send(s2, "are you there?"); turn.Answer != "still here" || turn.Status != agent.StatusDone {
		t.Errorf("the fork after its source's destruction: %+v", turn)
	}
	last := m.h.Model.Requests()[len(m.h.Model.Requests())-1]
	if got := roles(last); got != "system user assistant tool assistant user assistant tool assistant user" {
		t.Errorf("the fork's conversation: %s", got)
	}
	// Kept: the workspace is a snapshot.
	m.must(session.UpdateDestroy, session.DestroyRequest{Session: "s2", Keep: true}, &res)
	if res.Snapshot == "" {
		t.Error("a kept workspace has no snapshot")
	}
	if len(m.blobs(forkConv)) == 0 {
		t.Error("a kept session's conversation was deleted")
	}
	if q := m.query(); len(q) != 0 {
		t.Errorf("left: %+v", q)
	}
	m.fails(errdefs.NotFound, session.UpdateFork, session.ForkRequest{Session: "s1"})
}

// Pause, resume and switch: the sandbox follows, the workspace stays.
// The switch goes to another provider, "other": a second linux provider
// of its own state directory (cheap, unlike docker's image and daemon).
func TestPauseResumeSwitch(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.StopWorker()
	m.h.Opts.Providers["other"] = berthtest.Provider(t)
	m.h.StartWorker()
	m.h.Model.Script(write("w", "note.txt", "kept\n"), fakemodel.Reply{Text: "written"})
	s1 := m.create(session.CreateRequest{})
	m.send(s1, "write")
	var info session.Info
	m.must(session.UpdatePause, session.Ref{Session: "s1"}, &info)
	if info.Status != session.StatusPaused {
		t.Errorf("paused: %+v", info)
	}
	if st, _ := m.state(s1); st.Sandbox.State != sandbox.StatePaused && st.Sandbox.State != sandbox.StateHibernated {
		t.Errorf("the paused session's sandbox is %s", st.Sandbox.State)
	}
	// A message wakes it: the session tells its manager, whose registry
	// says so without a list.
	m.h.Model.Script(fakemodel.Reply{Text: "awake"})
	m.send(s1, "wake up")
	testkit.Eventually(t, "the registry to say s1 is active", 10*time.Second, func() bool {
		i, _ := find(m.query(), "s1")
		return i.Status == session.StatusActive
	})
	if i, _ := find(m.list(false), "s1"); i.Status != session.StatusActive {
		t.Errorf("after a message woke it: %+v", i)
	}
	m.must(session.UpdatePause, session.Ref{Session: "s1"}, &info)
	if info.Status != session.StatusPaused {
		t.Errorf("paused again: %+v", info)
	}
	if i, _ := find(m.list(false), "s1"); i.Status != session.StatusPaused {
		t.Errorf("listed while paused: %+v", i)
	}
	m.must(session.UpdateResume, session.Ref{Session: "s1"}, &info)
	if st, _ := m.state(s1); info.Status != session.StatusActive || st.Sandbox.State != sandbox.StateRunning {
		t.Errorf("resumed: %+v, sandbox %s", info, st.Sandbox.State)
	}
	before, _ := m.state(s1)
	m.must(session.UpdateSwitch, session.SwitchRequest{Session: "s1", Provider: "other"}, &info)
	after, _ := m.state(s1)
	if info.Status != session.StatusActive || info.Provider != "other" || after.Sandbox.Provider != "other" ||
		after.Sandbox.ID == before.Sandbox.ID {
		t.Errorf("switched: %+v, sandbox %s then %s", info, before.Sandbox.ID, after.Sandbox.ID)
	}
	if got := m.file(s1, "note.txt"); got != "kept\n" {
		t.Errorf("note.txt after the switch: %q", got)
	}
	m.fails(errdefs.BadInput, session.UpdateSwitch, session.SwitchRequest{Session: "s1", Provider: "nosuch"})
	if q := m.query(); q[0].Status != session.StatusActive || q[0].Provider != "other" {
		t.Errorf("after a failed switch: %+v", q[0])
	}
}

// A session that ends by itself says so; one terminated behind the
// manager's back is found out by UpdateList; destroying an ended
// session removes its entry.
func TestEnded(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	s1 := m.create(session.CreateRequest{})
	s2 := m.create(session.CreateRequest{})
	if err := m.h.C.TerminateWorkflow(t.Context(), s1.WorkflowID, "", "behind its back"); err != nil {
		t.Fatal(err)
	}
	if err := updateWorkflow(t.Context(), m.h.C, s2.WorkflowID, agent.UpdateEnd, agent.EndRequest{Destroy: true}, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "s2 to be marked ended", time.Minute, func() bool {
		i, _ := find(m.query(), "s2")
		return i.Status == session.StatusEnded
	})
	if i, _ := find(m.query(), "s1"); i.Status != session.StatusActive {
		t.Errorf("before a list, the terminated s1 is %+v", i)
	}
	if live := m.list(false); len(live) != 0 {
		t.Errorf("live after a list: %+v", live)
	}
	all := m.list(true)
	if i, _ := find(all, "s1"); i.Status != session.StatusEnded || !strings.Contains(i.Error, "Terminated") {
		t.Errorf("the terminated s1: %+v", i)
	}
	m.fails(errdefs.NotFound, session.UpdatePause, session.Ref{Session: "s1"})
	m.must(session.UpdateDestroy, session.DestroyRequest{Session: "s1"}, nil)
	if q := m.query(); len(q) != 1 || q[0].ID != "s2" {
		t.Errorf("after destroying s1: %+v", q)
	}
	// An operation on a session terminated behind the manager's back
	// fails NotFound, and marks it ended.
	s3 := m.create(session.CreateRequest{})
	if err := m.h.C.TerminateWorkflow(t.Context(), s3.WorkflowID, "", "behind its back"); err != nil {
		t.Fatal(err)
	}
	m.fails(errdefs.NotFound, session.UpdatePause, session.Ref{Session: "s3"})
	if i, _ := find(m.query(), "s3"); i.Status != session.StatusEnded {
		t.Errorf("s3 after a pause found it gone: %+v", i)
	}
}

// A manager whose history grows long continues as new, registry and
// numbering carried.
func TestManagerContinueAsNew(t *testing.T) {
	m := newManager(t, session.ManagerInput{ContinueAfter: 40})
	first, err := m.h.C.DescribeWorkflowExecution(t.Context(), m.id, "")
	if err != nil {
		t.Fatal(err)
	}
	m.create(session.CreateRequest{Title: "a"})
	m.create(session.CreateRequest{Title: "b"})
	for i := range 6 {
		m.must(session.UpdateRename, session.RenameRequest{Session: "s1", Title: fmt.Sprintf("a%d", i)}, nil)
	}
	testkit.Eventually(t, "the manager to continue as new", time.Minute, func() bool {
		d, err := m.h.C.DescribeWorkflowExecution(t.Context(), m.id, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetExecution().GetRunId() != first.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	})
	q := m.query()
	if len(q) != 2 || q[0].Title != "a5" || q[1].Title != "b" {
		t.Errorf("after continue-as-new: %+v", q)
	}
	if s3 := m.create(session.CreateRequest{}); s3.ID != "s3" {
		t.Errorf("numbering after continue-as-new: %+v", s3)
	}
}

// A front end may start the manager with no input at all.
func TestManagerNoInput(t *testing.T) {
	h := agenttest.New(t)
	id := fmt.Sprintf("mgr-%s-%d", t.Name(), time.Now().UnixNano())
	if _, err := h.C.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue},
		session.WorkflowName); err != nil {
		t.Fatal(err)
	}
	h.Terminate(id)
	var infos []session.Info
	if err := updateWorkflow(t.Context(), h.C, id, session.UpdateList, session.ListRequest{}, &infos); err != nil || infos == nil || len(infos) != 0 {
		t.Errorf("the list of a new manager: %v (%v)", infos, err)
	}
}

// The activity through which the manager updates sessions sends an
// Update once however often it is retried (its id is the manager's),
// and says NotFound, not to be retried, of a workflow that has ended.
func TestUpdateWorkflowOnce(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.Model.Script(fakemodel.Reply{Text: "once"}, fakemodel.Reply{Text: "twice"})
	s1 := m.create(session.CreateRequest{})
	acts := &calls.Activities{Client: m.h.C}
	arg, _ := json.Marshal(agent.SendRequest{Message: "hello"})
	in := calls.UpdateWorkflowInput{WorkflowID: s1.WorkflowID, Update: agent.UpdateSend, UpdateID: "op-1", Arg: arg}
	for range 2 {
		res, err := acts.UpdateWorkflow(t.Context(), in)
		if err != nil || string(res) != `{"turn":1}` {
			t.Fatalf("send by the activity: %s (%v)", res, err)
		}
	}
	testkit.Eventually(t, "turn 1", time.Minute, func() bool {
		st, err := m.state(s1)
		return err == nil && st.Turn.Status == agent.StatusDone
	})
	if st, _ := m.state(s1); st.Turn.Number != 1 || st.Queued != 0 || len(m.h.Model.Requests()) != 1 {
		t.Errorf("after one send sent twice: turn %d, %d queued, %d model calls", st.Turn.Number, st.Queued, len(m.h.Model.Requests()))
	}
	if err := m.h.C.TerminateWorkflow(t.Context(), s1.WorkflowID, "", "gone"); err != nil {
		t.Fatal(err)
	}
	in.UpdateID = "op-2"
	_, err := acts.UpdateWorkflow(t.Context(), in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != string(errdefs.NotFound) || !app.NonRetryable() {
		t.Errorf("an update of an ended workflow: %v, want NotFound, not retryable", err)
	}
}

// TestCreateCheckpoint: a session's checkpoint policy reaches its
// sandbox (each write checkpoints it, where one without a policy is
// never checkpointed), a fork keeps its source's, and a bad policy is
// one line of bad input that starts nothing.
func TestCreateCheckpoint(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.Model.Script(
		write("w1", "a.txt", "a\n"), fakemodel.Reply{Text: "written"}, // s1
		write("w2", "b.txt", "b\n"), fakemodel.Reply{Text: "written"}, // s2, the fork
		write("w3", "c.txt", "c\n"), fakemodel.Reply{Text: "written"}, // s3, no policy
	)
	checkpoint := func(info session.Info) string {
		t.Helper()
		st, err := m.state(info)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sandbox.Checkpoint
	}
	s1 := m.create(session.CreateRequest{CheckpointEvery: 1, CheckpointIdle: time.Hour})
	if got := checkpoint(s1); got != "" {
		t.Fatalf("a new session's checkpoint: %q", got)
	}
	m.send(s1, "write a")
	first := checkpoint(s1)
	if first == "" {
		t.Fatal("no checkpoint after a write under CheckpointEvery 1")
	}
	var s2 session.Info
	m.must(session.UpdateFork, session.ForkRequest{Session: "s1"}, &s2)
	from := checkpoint(s2) // the snapshot the fork was made from
	m.send(s2, "write b")
	if got := checkpoint(s2); got == "" || got == from || got == first {
		t.Errorf("the fork's checkpoint after a write: %q (made from %q); want a new one: the fork keeps the policy", got, from)
	}
	s3 := m.create(session.CreateRequest{})
	m.send(s3, "write c")
	if got := checkpoint(s3); got != "" {
		t.Errorf("a session without a policy was checkpointed after a write: %q", got)
	}

	for _, req := range []session.CreateRequest{{CheckpointEvery: -1}, {CheckpointInterval: time.Millisecond}, {CheckpointIdle: -time.Second}} {
		m.fails(errdefs.BadInput, session.UpdateCreate, req)
	}
	if got := len(m.query()); got != 3 {
		t.Errorf("%d sessions after refused creations; want the 3 made", got)
	}
}

// A create's idle settings reach the session's sandbox: one told to
// hibernate after a second does, and one told never to stays running.
func TestCreateIdleSettings(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	soon := m.create(session.CreateRequest{IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: time.Second})
	never := m.create(session.CreateRequest{IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
	testkit.Eventually(t, "s1 hibernated", 2*time.Minute, func() bool {
		st, err := m.state(soon)
		return err == nil && st.Sandbox.State == sandbox.StateHibernated
	})
	// s2 was made after s1 and told never to: by now it would have
	// hibernated too, had the manager's default been used instead.
	st, err := m.state(never)
	if err != nil || st.Sandbox.State != sandbox.StateRunning {
		t.Errorf("s2, never to pause: %+v %v", st.Sandbox, err)
	}
}
