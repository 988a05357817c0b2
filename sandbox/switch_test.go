package sandbox

import (
	"context"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// TestSwitchOverlaps: Switch makes the new sandbox while the checkpoint
// is taken, not after it, and returns before the old sandbox is
// destroyed; Stop, called at once, still waits for that destruction, so
// nothing is left on either provider.
func TestSwitchOverlaps(t *testing.T) {
	from, to := berthtest.Provider(t), berthtest.Provider(t)
	env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": from, "other": to})
	var mu sync.Mutex
	var events []string // in the order they happened
	note := func(e string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name == "Create" {
			var in activities.CreateInput
			if args.Get(&in) == nil && in.Provider == "other" {
				note("create other started")
			}
		}
	})
	env.SetOnActivityCompletedListener(func(info *activity.Info, _ converter.EncodedValue, _ error) {
		note(info.ActivityType.Name + " completed")
	})
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"})
		if err != nil {
			return "", err
		}
		if _, err := sbx.Exec(ctx, "echo moved > f"); err != nil {
			return "", err
		}
		if err := sbx.Switch(ctx, Provider{Name: "other"}); err != nil {
			return "", err
		}
		workflow.SideEffect(ctx, func(workflow.Context) any { note("switch returned"); return nil })
		res, err := sbx.Exec(ctx, "cat f")
		if err != nil {
			return "", err
		}
		return res.Stdout, sbx.Stop(ctx)
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var got string
	must(t, env.GetWorkflowResult(&got))
	if got != "moved\n" {
		t.Errorf("the workspace after the switch: %q", got)
	}
	at := func(e string) int {
		for i, x := range events {
			if x == e {
				return i
			}
		}
		t.Fatalf("%q never happened: %v", e, events)
		return -1
	}
	if at("create other started") > at("Snapshot completed") {
		t.Errorf("the new sandbox was created only after the checkpoint: %v", events)
	}
	destroyed := 0
	for i, e := range events {
		if e == "Destroy completed" {
			destroyed++
			if destroyed == 1 && i < at("switch returned") {
				t.Errorf("Switch waited for the old sandbox's destruction: %v", events)
			}
		}
	}
	for name, p := range map[string]provider.Provider{"linux": from, "other": to} {
		if left, err := p.List(context.Background(), nil); err != nil || len(left) != 0 {
			t.Errorf("%s: %d sandboxes left after Stop (%v)", name, len(left), err)
		}
	}
}
