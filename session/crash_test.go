package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/session/calls"
)

// snapshotsOf counts the snapshots a workflow owns.
func (m *manager) snapshotsOf(workflowID string) int {
	m.t.Helper()
	snaps, err := m.h.Opts.Snapshots.List(m.t.Context())
	if err != nil {
		m.t.Fatal(err)
	}
	n := 0
	for _, snap := range snaps {
		if snap.Labels[sandbox.LabelWorkflowID] == workflowID {
			n++
		}
	}
	return n
}

func (m *manager) historyLength(id string) int {
	m.t.Helper()
	d, err := m.h.C.DescribeWorkflowExecution(m.t.Context(), id, "")
	if err != nil {
		m.t.Fatal(err)
	}
	return int(d.GetWorkflowExecutionInfo().GetHistoryLength())
}

// A fork sent again with the same Update id after the session continued
// as new (a manager's activity retried across it) is answered with the
// first answer: one snapshot. A result too long to remember whole (a
// long system prompt) still gives the same snapshot.
func TestForkOnceAcrossContinueAsNew(t *testing.T) {
	m := newManager(t, session.ManagerInput{Session: agent.SessionInput{ContinueAfter: 40}})
	m.h.Model.Script(fakemodel.Reply{Text: "one"}, fakemodel.Reply{Text: "two"})
	acts := &calls.Activities{Client: m.h.C}
	for i, prompt := range []string{"", strings.Repeat("Be brief. ", 1000)} {
		s := m.create(session.CreateRequest{SystemPrompt: prompt})
		owner := session.WorkflowID(m.id, "s9"+s.ID)
		arg, _ := json.Marshal(agent.ForkRequest{Owner: owner})
		in := calls.UpdateWorkflowInput{WorkflowID: s.WorkflowID, Update: agent.UpdateFork, UpdateID: m.id + "#fork-" + s.ID, Arg: arg}
		first, err := acts.UpdateWorkflow(t.Context(), in)
		if err != nil {
			t.Fatalf("fork %s: %v", s.ID, err)
		}
		t.Logf("%s: %d events after the fork", s.ID, m.historyLength(s.WorkflowID))
		// A turn makes the history long: the session continues as new.
		m.send(s, "hello")
		testkit.Eventually(t, s.ID+" to continue as new", time.Minute, func() bool {
			st, err := m.state(s)
			return err == nil && st.Runs == 2
		})
		again, err := acts.UpdateWorkflow(t.Context(), in)
		if err != nil {
			t.Fatalf("fork %s again: %v", s.ID, err)
		}
		var a, b agent.ForkResult
		if json.Unmarshal(first, &a) != nil || json.Unmarshal(again, &b) != nil || a.Fork.Snapshot == "" ||
			a.Fork.Snapshot != b.Fork.Snapshot {
			t.Errorf("%s: forked %s, then %s", s.ID, a.Fork.Snapshot, b.Fork.Snapshot)
		}
		if i == 0 && string(first) != string(again) {
			t.Errorf("%s: a short answer is not remembered whole:\n%s\n%s", s.ID, first, again)
		}
		if n := m.snapshotsOf(owner); n != 1 {
			t.Errorf("%s: %d snapshots for one fork sent twice", s.ID, n)
		}
		// Another id is another fork.
		in.UpdateID += "-2"
		if _, err := acts.UpdateWorkflow(t.Context(), in); err != nil {
			t.Fatal(err)
		}
		if n := m.snapshotsOf(owner); n != 2 {
			t.Errorf("%s: %d snapshots after a second fork", s.ID, n)
		}
	}
}

// sandboxesOf lists the sandboxes of a session's workflow, from the
// provider.
func (m *manager) sandboxesOf(workflowID string) []string {
	m.t.Helper()
	infos, err := m.h.P.List(m.t.Context(), map[string]string{sandbox.LabelWorkflowID: workflowID})
	if err != nil {
		m.t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		out = append(out, i.ID+":"+string(i.State))
	}
	return out
}

// pendingUpdate says whether the manager waits on its activity that
// updates a session.
func (m *manager) pendingUpdate() bool {
	d, err := m.h.C.DescribeWorkflowExecution(m.t.Context(), m.id, "")
	if err != nil {
		return false
	}
	for _, a := range d.PendingActivities {
		if strings.HasSuffix(a.GetActivityType().GetName(), "UpdateWorkflow") {
			return true
		}
	}
	return false
}

// retried lists the activities of a workflow's runs that were tried
// more than once, and the workflow tasks that failed or timed out.
func (m *manager) retried(id string) []string {
	m.t.Helper()
	var out []string
	it := m.h.C.GetWorkflowHistory(m.t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	sched := map[int64]string{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			m.t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			sched[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 {
			out = append(out, fmt.Sprintf("%s attempt %d", sched[a.GetScheduledEventId()], a.GetAttempt()))
		}
		if ev.GetWorkflowTaskFailedEventAttributes() != nil || ev.GetWorkflowTaskTimedOutEventAttributes() != nil {
			out = append(out, ev.GetEventType().String())
		}
	}
	return out
}

// crash sends the manager an Update, stops the host's worker once
// during is true, starts a new one, and returns the Update's outcome.
// The worker is stopped as a process would stop it: Stop cancels what
// runs (an in-process kill -9 is not possible in a test).
func (m *manager) crash(name string, arg any, result any, during func() bool) error {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(m.t.Context(), 3*time.Minute)
	defer cancel()
	handle, err := m.h.C.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: m.id, UpdateName: name,
		Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		return err
	}
	testkit.Eventually(m.t, name+" to be under way", time.Minute, during)
	stopped := time.Now()
	// StopWorker returns once every poll and activity of the worker has
	// ended: nothing of it is left to wait for before the next starts.
	m.h.StopWorker()
	m.t.Logf("%s: the worker stopped in %v", name, time.Since(stopped).Round(time.Millisecond))
	m.h.StartWorker()
	err = handle.Get(ctx, result)
	m.t.Logf("%s: answered %v after the stop", name, time.Since(stopped).Round(time.Millisecond))
	return err
}

// The worker stops in the middle of a create, a fork and a destroy, and
// a new one starts: each takes effect once (one session, one sandbox,
// one snapshot; nothing left of the destroyed one), and the manager
// goes on serving. It takes 5 s to 2 minutes: a sandbox activity the
// stop interrupts (the provider's Destroy) may be retried only after its
// timeout, its failure not reported, as after a real crash.
func TestWorkerStopsMidOperation(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.Model.Script(write("w", "note.txt", "hello\n"), fakemodel.Reply{Text: "written"},
		fakemodel.Reply{Text: "the fork answers"})

	// Create: stopped once the provider has the session's sandbox,
	// before the manager hears of it. (Stopped in the middle of the
	// provider's Create, the activity's failure may not reach the server:
	// it is retried after its 2-minute timeout, as after a real crash.)
	var s1 session.Info
	err := m.crash(session.UpdateCreate, session.CreateRequest{Title: "a"}, &s1, func() bool {
		return len(m.sandboxesOf(session.WorkflowID(m.id, "s1"))) > 0
	})
	if err != nil || s1.ID != "s1" || s1.Status != session.StatusActive {
		t.Fatalf("create across a stopped worker: %+v (%v)", s1, err)
	}
	if sbs := m.sandboxesOf(s1.WorkflowID); len(sbs) != 1 {
		t.Errorf("s1's sandboxes: %v", sbs)
	}
	t.Logf("create: retried in s1 %v, in the manager %v", m.retried(s1.WorkflowID), m.retried(m.id))
	m.send(s1, "write a note")

	// Fork: stopped while the manager waits on the source's Update.
	var s2 session.Info
	err = m.crash(session.UpdateFork, session.ForkRequest{Session: "s1", Title: "b"}, &s2, m.pendingUpdate)
	if err != nil || s2.ID != "s2" || s2.ForkOf != "s1" || s2.Status != session.StatusActive {
		t.Fatalf("fork across a stopped worker: %+v (%v)", s2, err)
	}
	t.Logf("fork: retried in s1 %v, in the manager %v", m.retried(s1.WorkflowID), m.retried(m.id))
	if n := m.snapshotsOf(s2.WorkflowID); n != 1 {
		t.Errorf("%d snapshots for one fork", n)
	}
	if sbs := m.sandboxesOf(s2.WorkflowID); len(sbs) != 1 {
		t.Errorf("s2's sandboxes: %v", sbs)
	}
	if got := m.file(s2, "note.txt"); got != "hello\n" {
		t.Errorf("the fork's note.txt: %q", got)
	}
	if turn := m.send(s2, "are you there?"); turn.Answer != "the fork answers" {
		t.Errorf("the fork's turn: %+v", turn)
	}

	// Destroy: stopped while the manager waits on the session's end.
	var res session.DestroyResult
	if err := m.crash(session.UpdateDestroy, session.DestroyRequest{Session: "s1"}, &res, m.pendingUpdate); err != nil {
		t.Fatalf("destroy across a stopped worker: %v", temporalerr.OneLine(err))
	}
	t.Logf("destroy: retried in s1 %v, in the manager %v", m.retried(s1.WorkflowID), m.retried(m.id))
	testkit.Eventually(t, "s1's workflow to close", time.Minute, func() bool { return m.closed(s1.WorkflowID) })
	if left := append(m.blobs(agent.ConversationPrefix(s1.WorkflowID)), m.blobs(agent.StreamPrefix(s1.WorkflowID))...); len(left) != 0 {
		t.Errorf("the destroyed session's blobs are left: %v", left)
	}
	if sbs := m.sandboxesOf(s1.WorkflowID); len(sbs) != 0 {
		t.Errorf("the destroyed session's sandboxes are left: %v", sbs)
	}

	// The registry holds the fork alone, and the manager serves.
	if q := m.query(); len(q) != 1 || q[0].ID != "s2" || q[0].Status != session.StatusActive {
		t.Errorf("the registry after the stops: %+v", q)
	}
	if s3 := m.create(session.CreateRequest{}); s3.ID != "s3" {
		t.Errorf("after the stops, a session is %+v", s3)
	}
	if live := m.list(false); len(live) != 2 {
		t.Errorf("listed after the stops: %+v", live)
	}
}
