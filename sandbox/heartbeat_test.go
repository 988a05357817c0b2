package sandbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/sandbox"
)

// TestHeartbeatTimeout: the activities that heartbeat (a sandbox's
// creation and destruction) get the heartbeat timeout of the context the
// handle was made under, DefaultHeartbeatTimeout without one.
func TestHeartbeatTimeout(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  time.Duration
		want time.Duration
	}{
		{"default", 0, sandbox.DefaultHeartbeatTimeout},
		{"set", 3 * time.Second, 3 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, _ := newEnv(t)
			var mu sync.Mutex
			got := map[string]time.Duration{}
			env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
				mu.Lock()
				defer mu.Unlock()
				got[info.ActivityType.Name] = info.HeartbeatTimeout
			})
			wf := func(ctx workflow.Context) error {
				if tt.set != 0 {
					ctx = sandbox.WithHeartbeatTimeout(ctx, tt.set)
				}
				sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
				if err != nil {
					return err
				}
				return sbx.Stop(ctx)
			}
			env.RegisterWorkflow(wf)
			env.ExecuteWorkflow(wf)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, name := range []string{"Create", "Destroy"} {
				if d, ok := got[name]; !ok || d != tt.want {
					t.Errorf("%s activity: heartbeat timeout %v (ran: %v), want %v", name, d, ok, tt.want)
				}
			}
		})
	}
}
