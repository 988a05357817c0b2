package hostworker_test

import (
	"slices"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// reaperStatus asks the reaper id what it has done.
func reaperStatus(t *testing.T, c client.Client, id string) workflows.ReaperStatus {
	t.Helper()
	var st workflows.ReaperStatus
	v, err := c.QueryWorkflow(t.Context(), id, "", workflows.QueryReaper)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		t.Fatalf("query the reaper: %v", err)
	}
	return st
}

// waitFor polls cond every 50 ms for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// TestHostReaper: a host runs one long-lived reaper, which makes a pass
// as soon as the host starts (and again when it starts again, for what
// was left while it was down), then every interval, and continues as
// new; the schedule of the reaper of old is deleted, and no workflow is
// left per pass.
func TestHostReaper(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	const hostQueue = "berth@reaped"
	id := workflows.ReaperID(hostQueue)
	// The schedule a host made before berth.Reaper.
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:   "berth-reaper-" + hostQueue,
		Spec: client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: time.Hour}}},
		Action: &client.ScheduleWorkflowAction{ID: "berth-reap-" + hostQueue, Workflow: "Reaper", TaskQueue: sandbox.DefaultQueue,
			Args: []any{workflows.ReaperInput{Queue: hostQueue}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	data := shortDataDir(t)
	cfg := hostworker.HostConfig{DataDir: data, Providers: []string{"linux"}, Queue: sandbox.DefaultQueue,
		HostQueue: hostQueue, ReapEvery: time.Hour}
	h, err := hostworker.StartHost(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a pass at the host's start", func() bool { return reaperStatus(t, c, id).Passes == 1 })
	if _, err := c.ScheduleClient().GetHandle(ctx, "berth-reaper-"+hostQueue).Describe(ctx); err == nil {
		t.Error("the old reaper's schedule is still there")
	} else if _, missing := err.(*serviceerror.NotFound); !missing {
		t.Errorf("describe the old schedule: %v", err)
	}

	// A sandbox whose owner is gone without cleaning up (terminated).
	owner, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue},
		workflows.SandboxWorkflowName, workflows.SandboxInput{Provider: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	var sbx workflows.SandboxStatus
	waitFor(t, "the sandbox", func() bool {
		v, err := c.QueryWorkflow(ctx, owner.GetID(), "", workflows.QuerySandbox)
		return err == nil && v.Get(&sbx) == nil && sbx.ID != ""
	})
	if err := c.TerminateWorkflow(ctx, owner.GetID(), "", "gone"); err != nil {
		t.Fatal(err)
	}
	// The host restarts: the same reaper reaps it at once.
	first := reaperStatus(t, c, id)
	h.Close()
	if h, err = hostworker.StartHost(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	waitFor(t, "a pass at the host's restart", func() bool { return reaperStatus(t, c, id).Passes > first.Passes })
	if st := reaperStatus(t, c, id); !slices.Contains(st.Last.Sandboxes, sbx.ID) || st.Error != "" {
		t.Errorf("the pass at restart: %+v, want %s reaped", st, sbx.ID)
	}

	// Every interval, and continuing as new: the settings a host sends
	// are the reaper's from then on.
	if _, err := c.SignalWithStartWorkflow(ctx, id, workflows.SignalReap,
		workflows.ReaperInput{Queue: hostQueue, Every: 50 * time.Millisecond, ContinueAfter: 3},
		client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.ReaperWorkflowName, workflows.ReaperInput{}); err != nil {
		t.Fatal(err)
	}
	list := func() (running, continued int) {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowId = '" + id + "'"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range resp.Executions {
			switch e.GetStatus() {
			case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
				running++
			case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
				continued++
			default:
				t.Fatalf("a run of the reaper ended %v", e.GetStatus())
			}
		}
		return running, continued
	}
	waitFor(t, "passes every 50ms, continuing as new after 3", func() bool {
		running, continued := list()
		return running == 1 && continued >= 2
	})
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowType = 'Reaper' OR WorkflowType = '" + workflows.ReaperWorkflowName + "'"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.Executions {
		if e.GetExecution().GetWorkflowId() != id {
			t.Errorf("a reaper workflow %s besides the host's", e.GetExecution().GetWorkflowId())
		}
	}
}
