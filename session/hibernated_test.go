package session_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/sandbox/ops"
	"github.com/berth-dev/berth/session"
)

// A session made hibernated from a template's snapshot has no sandbox
// until its first command, which runs in the template's workspace. The
// worker stops in the middle of that first wake (the sandbox made, its
// workspace being restored) and a new one starts: the wake completes
// once (one sandbox) and the command runs once.
func TestCreateHibernatedFromSnapshot(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	m.h.Model.Script(write("w", "note.txt", "from the template\n"), fakemodel.Reply{Text: "written"})
	tmpl := m.create(session.CreateRequest{Title: "template"})
	m.send(tmpl, "write the note")
	// A workspace large enough that its restore takes a while: the stop
	// comes during it.
	var big ops.RunOutput
	if err := updateWorkflow(t.Context(), m.h.C, tmpl.WorkflowID, ops.UpdateExec,
		ops.ExecRequest{Shell: "head -c 96M /dev/urandom > big.bin"}, &big); err != nil || big.ExitCode != 0 {
		t.Fatalf("write big.bin: %+v %v", big, err)
	}
	var kept session.DestroyResult
	m.must(session.UpdateDestroy, session.DestroyRequest{Session: tmpl.ID, Keep: true}, &kept)
	if kept.Snapshot == "" {
		t.Fatal("the template's workspace was not kept")
	}

	t0 := time.Now()
	s := m.create(session.CreateRequest{Title: "idle", FromSnapshot: kept.Snapshot, Hibernated: true})
	t.Logf("created hibernated in %v", time.Since(t0).Round(time.Millisecond))
	if s.Status != session.StatusActive {
		t.Errorf("created: %+v", s)
	}
	if sbs := m.sandboxesOf(s.WorkflowID); len(sbs) != 0 {
		t.Errorf("sandboxes before the first command: %v", sbs)
	}
	st, err := m.state(s)
	if err != nil {
		t.Fatal(err)
	}
	if sb := st.Sandbox; sb.State != sandbox.StateHibernated || !sb.NotYetMade || sb.Checkpoint != kept.Snapshot || sb.ID != "" {
		t.Errorf("the session's sandbox before its first command: %+v", sb)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	handle, err := m.h.C.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: s.WorkflowID, UpdateName: ops.UpdateExec,
		Args: []any{ops.ExecRequest{Shell: "echo ran >> once.log; cat note.txt"}}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the first wake to restore the template", time.Minute, func() bool {
		return m.pending(s.WorkflowID, "Restore")
	})
	stopped := time.Now()
	m.h.StopWorker()
	m.h.StartWorker()
	var out ops.RunOutput
	if err := handle.Get(ctx, &out); err != nil {
		t.Fatalf("the first command across a stopped worker: %s", temporalerr.OneLine(err))
	}
	t.Logf("the first command answered %v after the stop; retried: %v", time.Since(stopped).Round(time.Millisecond), m.retried(s.WorkflowID))
	if restored := m.retried(s.WorkflowID); !strings.Contains(strings.Join(restored, " "), "Restore attempt 2") {
		t.Logf("the restore was not retried: the stop came after it ended")
	}
	if got := string(out.Stdout.Inline); got != "from the template\n" {
		t.Errorf("the first command printed %q", got)
	}
	if sbs := m.sandboxesOf(s.WorkflowID); len(sbs) != 1 {
		t.Errorf("sandboxes after the first wake: %v", sbs)
	}
	if got := m.file(s, "once.log"); got != "ran\n" {
		t.Errorf("once.log: %q: the command ran other than once", got)
	}
	if st, err := m.state(s); err != nil || st.Sandbox.State != sandbox.StateRunning || st.Sandbox.NotYetMade || st.Sandbox.Generation != 1 {
		t.Errorf("the session's sandbox after the wake: %+v (%v)", st.Sandbox, err)
	}
}

// pending says whether an activity whose name ends with name is pending
// in a workflow.
func (m *manager) pending(id, name string) bool {
	d, err := m.h.C.DescribeWorkflowExecution(m.t.Context(), id, "")
	if err != nil {
		return false
	}
	for _, a := range d.PendingActivities {
		if strings.HasSuffix(a.GetActivityType().GetName(), name) {
			return true
		}
	}
	return false
}

// Bad input to a hibernated create fails it at once, as one typed line,
// and leaves nothing in the registry: a snapshot that is not there, one
// that is no snapshot's name, and a session from both a snapshot and a
// fork.
func TestCreateHibernatedBadInput(t *testing.T) {
	m := newManager(t, session.ManagerInput{})
	for _, tc := range []struct {
		kind errdefs.Kind
		req  session.CreateRequest
	}{
		{errdefs.NotFound, session.CreateRequest{FromSnapshot: "no-such-template", Hibernated: true}},
		{errdefs.BadInput, session.CreateRequest{FromSnapshot: "../up", Hibernated: true}},
	} {
		t0 := time.Now()
		m.fails(tc.kind, session.UpdateCreate, tc.req)
		if d := time.Since(t0); d > 10*time.Second {
			t.Errorf("%+v failed after %v", tc.req, d)
		}
	}
	if q := m.query(); len(q) != 0 {
		t.Errorf("the registry after failed creates: %+v", q)
	}
	run, err := m.h.C.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: m.id + "-both", TaskQueue: sandbox.DefaultQueue},
		agent.WorkflowName, agent.SessionInput{FromSnapshot: "a-template", Hibernated: true, Fork: &agent.ForkFrom{Snapshot: "a-fork"}})
	if err != nil {
		t.Fatal(err)
	}
	err = run.Get(t.Context(), nil)
	if temporalerr.KindOf(err) != errdefs.BadInput || strings.Contains(temporalerr.OneLine(err), "\n") ||
		!strings.Contains(temporalerr.OneLine(err), "not both") {
		t.Errorf("a session from a snapshot and a fork: %v", err)
	}
}
