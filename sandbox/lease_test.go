package sandbox

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// TestIdleTimeoutIsLease: the sandbox's idle timeout is its lease, so
// that a sandbox whose host is gone stops its own processes after as
// long as the workflow would have paused it; never shorter than
// provider.MinLease, and none when the sandbox never idles.
func TestIdleTimeoutIsLease(t *testing.T) {
	p := berthtest.Provider(t)
	for _, tt := range []struct {
		name string
		idle time.Duration
		want time.Duration
	}{
		{"Default", 0, DefaultIdleTimeout},
		{"Set", 7 * time.Second, 7 * time.Second},
		{"Short", 200 * time.Millisecond, provider.MinLease},
		{"Never", NoIdleTimeout, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": p})
			var got *time.Duration
			env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
				var in activities.CreateInput
				if info.ActivityType.Name == "Create" && args.Get(&in) == nil {
					got = &in.Spec.Lease
				}
			})
			wf := func(ctx workflow.Context) error {
				sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(tt.idle))
				if err != nil {
					return err
				}
				return sbx.Stop(ctx)
			}
			env.RegisterWorkflow(wf)
			env.ExecuteWorkflow(wf)
			must(t, env.GetWorkflowResult(nil))
			if got == nil {
				t.Fatal("no Create ran")
			}
			if *got != tt.want {
				t.Errorf("idle timeout %v: Spec.Lease = %v, want %v", tt.idle, *got, tt.want)
			}
		})
	}
}
