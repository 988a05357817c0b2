package sandbox

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/snapshot"
)

// TestReapSweepsPastAFailure: a reaping whose checkpoint sweep fails
// (its snapshot store is gone) still sweeps transfers and outputs, and
// fails naming the sweep that failed.
func TestReapSweepsPastAFailure(t *testing.T) {
	env, acts := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": berthtest.Provider(t)})
	gone := berthtest.Bucket(t)
	gone.Close()
	acts.Snapshots = snapshot.New(gone)
	var mu sync.Mutex
	started := map[string]int{}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		mu.Lock()
		defer mu.Unlock()
		started[info.ActivityType.Name]++
	})
	env.ExecuteWorkflow(func(ctx workflow.Context) (ReapReport, error) {
		return Reap(ctx, berthtest.Queue, 0)
	})
	err := env.GetWorkflowError()
	if err == nil || !strings.Contains(err.Error(), "reap checkpoints") {
		t.Errorf("the reaping: %v, want the checkpoint sweep's failure", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"List", "ReapSnapshots", "SweepTransfers", "SweepOutputs"} {
		if started[name] == 0 {
			t.Errorf("%s never ran (activities started: %v)", name, started)
		}
	}
}
