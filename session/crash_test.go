package session_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
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
	acts := &activities.Activities{Client: m.h.C}
	for i, prompt := range []string{"", strings.Repeat("Be brief. ", 1000)} {
		s := m.create(session.CreateRequest{SystemPrompt: prompt})
		owner := session.WorkflowID(m.id, "s9"+s.ID)
		arg, _ := json.Marshal(agent.ForkRequest{Owner: owner})
		in := activities.UpdateWorkflowInput{WorkflowID: s.WorkflowID, Update: agent.UpdateFork, UpdateID: m.id + "#fork-" + s.ID, Arg: arg}
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
