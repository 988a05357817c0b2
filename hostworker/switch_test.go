package hostworker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestSwitch: the berth.switch update moves a standalone sandbox to a
// new sandbox (here of the same provider: the others have tests of their
// own), its workspace along, and keeps serving; a provider no worker
// serves is refused and the sandbox keeps its workspace where it was.
func TestSwitch(t *testing.T) {
	ctx := t.Context()
	c := berth(t)
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: time.Hour}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "switched", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CancelWorkflow(context.WithoutCancel(ctx), run.GetID(), "")
	before := sandboxStatus(t, c, run.GetID())
	execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "mkdir -p d && echo kept > d/f && chmod 750 d && ln -s d/f link"})

	if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: "linux"}); err != nil {
		t.Fatal(sandbox.OneLine(err))
	}
	after := sandboxStatus(t, c, run.GetID())
	if after.ID == before.ID || after.Provider != "linux" {
		t.Errorf("after the switch: sandbox %s on %s, want a new one (was %s)", after.ID, after.Provider, before.ID)
	}
	out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "cat link; stat -c %a d"})
	if got := string(out.Stdout.Inline); got != "kept\n750\n" {
		t.Errorf("the workspace after the switch: %q", got)
	}

	err = update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: "nosuch"})
	if sandbox.ErrorKind(err) != provider.KindBadInput || !strings.Contains(sandbox.OneLine(err), "nosuch") {
		t.Fatalf("switch to a provider no worker serves: %v, want bad input naming it", err)
	}
	if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{}); err == nil {
		t.Fatal("switch to no provider was accepted")
	}
	still := sandboxStatus(t, c, run.GetID())
	if still.ID != after.ID {
		t.Errorf("a failed switch changed the sandbox: %s, was %s", still.ID, after.ID)
	}
	if out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "cat d/f"}); string(out.Stdout.Inline) != "kept\n" {
		t.Errorf("the workspace after a failed switch: %q", out.Stdout.Inline)
	}
}
