package hostworker_test

import (
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestRunResultBeforeDestroy: a Run answers berth.run.result with its
// command's result as soon as the command ended, before its sandbox is
// destroyed (what lets berth run return early), the same result as the
// workflow's; a run that fails answers it with an error, so that callers
// take the run's own result.
func TestRunResultBeforeDestroy(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "linux", Argv: []string{"sh", "-c", "echo early; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: workflows.UpdateRunResult,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		t.Fatal(err)
	}
	var early, final workflows.RunOutput
	if err := h.Get(ctx, &early); err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, &final); err != nil {
		t.Fatal(err)
	}
	if early.ExitCode != 7 || string(early.Stdout.Inline) != "early\n" || early.Sandbox != final.Sandbox || early.ExitCode != final.ExitCode {
		t.Errorf("early result %+v, final %+v", early, final)
	}
	// In history: the Update completed before the destruction ended
	// (in the workflow task that began it).
	var completed, beforeDestroyed bool
	var destroy int64
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			completed = true
		case e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "Destroy":
			destroy = e.GetEventId()
		case destroy != 0 && e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId() == destroy:
			beforeDestroyed = completed
		}
	}
	if !completed || !beforeDestroyed {
		t.Errorf("update completed %v, before the sandbox was destroyed %v: want both", completed, beforeDestroyed)
	}

	bad, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "nosuch", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	h, err = c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: bad.GetID(), UpdateName: workflows.UpdateRunResult,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, &early)
	}
	if err == nil {
		t.Errorf("a failed run answered berth.run.result with %+v", early)
	}
	if err := bad.Get(ctx, nil); err == nil {
		t.Error("a run on a provider no worker serves succeeded")
	}
}
