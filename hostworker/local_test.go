package hostworker_test

import (
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// shortThenLong runs a short command, then one longer than
// activities.LocalWindow, and returns their outputs.
func shortThenLong(ctx workflow.Context) ([]string, error) {
	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
	if err != nil {
		return nil, err
	}
	defer sbx.Stop(ctx)
	var outs []string
	for _, cmd := range []string{"echo short", "echo before; sleep 1; echo after"} {
		res, err := sbx.Exec(ctx, cmd)
		if err != nil {
			return nil, err
		}
		outs = append(outs, res.Stdout)
	}
	return outs, nil
}

// TestExecLocalFirst: on the sandbox's own host, a short command runs as
// a local activity, with no activity task through the server; a longer
// one is handed, running, to one Exec activity, which completes it on
// its first attempt.
func TestExecLocalFirst(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)}, Outputs: berthtest.Bucket(t),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Workflows: []any{shortThenLong},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, shortThenLong)
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	if err := run.Get(ctx, &outs); err != nil {
		t.Fatal(err)
	}
	if strings.Join(outs, "|") != "short\n|before\nafter\n" {
		t.Errorf("outputs %q", outs)
	}
	var execs, markers int
	it := c.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "Exec" {
				execs++
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if a := e.GetActivityTaskStartedEventAttributes(); a.GetAttempt() > 1 {
				t.Errorf("an activity ran %d times", a.GetAttempt())
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			// Besides the commands', the creation's Route.
			m := e.GetMarkerRecordedEventAttributes()
			if m.GetMarkerName() == "LocalActivity" && strings.Contains(string(m.GetDetails()["data"].GetPayloads()[0].GetData()), `"ExecLocal"`) {
				markers++
			}
		}
	}
	if execs != 1 || markers != 2 {
		t.Errorf("history: %d Exec activities and %d local activities; want 1 (the long command's) and 2 ExecLocal", execs, markers)
	}
}
