package hostworker_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/provider"
)

// busyLoop runs workflow tasks back to back for d: each ends with a
// timer that fires at once.
func busyLoop(ctx workflow.Context, d time.Duration) error {
	end := workflow.Now(ctx).Add(d)
	for workflow.Now(ctx).Before(end) {
		if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func probe(workflow.Context) error { return nil }

// slowPolls delays each workflow task a poll returns, as a loaded
// server answers: the worker's pollers then take the tasks more slowly
// than busy workflows make them, and its sticky queue keeps a backlog.
func slowPolls(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if r, ok := reply.(*workflowservice.PollWorkflowTaskQueueResponse); ok && err == nil && len(r.GetTaskToken()) > 0 {
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// TestNormalQueueUnderStickyBacklog: while the workflows a worker has
// cached keep its sticky queue backlogged, a new workflow, whose first
// task is on the queue itself, still runs. The SDK's default pollers
// all went to the sticky queue while it had a backlog; a session whose
// task fell back to the queue (its sticky timeout passed) waited there
// until the load ended.
func TestNormalQueueUnderStickyBacklog(t *testing.T) {
	opts := testserver.Options(t)
	opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(slowPolls))
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const queue = "pollers"
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)}, Outputs: berthtest.Bucket(t),
		Queue: queue, HostQueue: queue, Workflows: []any{busyLoop, probe},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	// 20 workflows of back-to-back tasks against 2 polls a 100 ms.
	for range 20 {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, busyLoop, 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.TerminateWorkflow(context.WithoutCancel(ctx), run.GetID(), run.GetRunID(), "the test is over")
	}
	time.Sleep(5 * time.Second) // the backlog builds
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, probe)
	if err != nil {
		t.Fatal(err)
	}
	// The busy workflows run for 2 minutes: a probe starved until they
	// end takes more than 1.
	pctx, pcancel := context.WithTimeout(ctx, time.Minute)
	defer pcancel()
	t0 := time.Now()
	if err := run.Get(pctx, nil); err != nil {
		t.Fatalf("a new workflow under a sticky backlog: %v after %s", err, time.Since(t0).Round(time.Second))
	}
	t.Logf("a new workflow under a sticky backlog ran in %s", time.Since(t0).Round(time.Millisecond))
}
