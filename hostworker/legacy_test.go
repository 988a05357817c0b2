package hostworker_test

import (
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestOldNamesCarryOn: executions started under the names berth used
// before berth.<Name> (as a server upgraded under them holds) run on: a
// Sandbox serves its operations and continues as new, as berth.Sandbox,
// still serving them; a Run, a Reaper pass, Providers and Snapshots
// end as they did.
func TestOldNamesCarryOn(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	start := func(name string, in any) client.WorkflowRun {
		t.Helper()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, name, in)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	sbx := start("Sandbox", workflows.SandboxInput{Provider: "linux", ContinueAfter: 40})
	defer c.CancelWorkflow(t.Context(), sbx.GetID(), "")
	for i := 0; ; i++ {
		if out := execIn(t, c, sbx.GetID(), workflows.ExecRequest{Argv: []string{"true"}}); out.ExitCode != 0 {
			t.Fatalf("exec: %+v", out)
		}
		desc, err := c.DescribeWorkflowExecution(ctx, sbx.GetID(), "")
		if err != nil {
			t.Fatal(err)
		}
		if name := desc.GetWorkflowExecutionInfo().GetType().GetName(); name == workflows.SandboxWorkflowName {
			break
		}
		if i == 20 {
			t.Fatal("the Sandbox did not continue as new as berth.Sandbox")
		}
	}
	if out := execIn(t, c, sbx.GetID(), workflows.ExecRequest{Shell: "echo carried on"}); string(out.Stdout.Inline) != "carried on\n" {
		t.Errorf("exec after continuing as new: %+v", out)
	}

	var out workflows.RunOutput
	if err := start("Run", workflows.RunInput{Provider: "linux", Argv: []string{"true"}}).Get(ctx, &out); err != nil || out.ExitCode != 0 {
		t.Errorf("Run: %+v, %v", out, err)
	}
	var report sandbox.ReapReport
	if err := start("Reaper", workflows.ReaperInput{Queue: sandbox.DefaultQueue}).Get(ctx, &report); err != nil {
		t.Errorf("Reaper: %v", err)
	}
	var hosts []sandbox.HostProviders
	if err := start("Providers", workflows.ProvidersInput{}).Get(ctx, &hosts); err != nil || len(hosts) != 1 {
		t.Errorf("Providers: %+v, %v", hosts, err)
	}
	var snaps workflows.SnapshotsOutput
	if err := start("Snapshots", workflows.SnapshotsInput{}).Get(ctx, &snaps); err != nil {
		t.Errorf("Snapshots: %v", err)
	}
}
