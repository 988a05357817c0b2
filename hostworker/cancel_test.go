package hostworker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// holdSandbox makes a sandbox and keeps it until cancelled.
func holdSandbox(ctx workflow.Context) error {
	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
	if err != nil {
		return err
	}
	defer sbx.Stop(ctx)
	return workflow.Sleep(ctx, time.Hour)
}

// TestCancelDuringCreate cancels workflows on a real server at moments
// spread over their sandbox's creation: none may leave its sandbox
// behind. (The activity making it does not heartbeat, so it is not told
// of the cancellation and finishes its work.)
func TestCancelDuringCreate(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	p := berthtest.Provider(t)
	bucket := berthtest.Bucket(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: bucket,
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Workflows: []any{holdSandbox},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	for i := range 20 {
		delay := time.Duration(i*3) * time.Millisecond
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandbox)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		if err := c.CancelWorkflow(ctx, run.GetID(), ""); err != nil {
			t.Fatal(err)
		}
		var canceled *temporal.CanceledError
		if err := run.Get(ctx, nil); !errors.As(err, &canceled) {
			t.Fatalf("cancelled after %v: %v, want a cancellation", delay, err)
		}
		if infos, err := p.List(ctx, nil); err != nil || len(infos) != 0 {
			t.Fatalf("cancelled after %v: left %s", delay, fmt.Sprint(infos, err))
		}
	}
}
