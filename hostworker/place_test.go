package hostworker_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// holdSandboxes creates n linux sandboxes one after the other, each
// waiting for a host with room for up to wait, answers the query
// "queues" with where each landed, and holds them until the signal
// "release" (each one stops one, the oldest first) or "done".
func holdSandboxes(ctx workflow.Context, n int, wait time.Duration) ([]string, error) {
	var queues []string
	if err := workflow.SetQueryHandler(ctx, "queues", func() ([]string, error) { return queues, nil }); err != nil {
		return nil, err
	}
	var held []*sandbox.Sandbox
	for range n {
		sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"}, sandbox.WithPlacementTimeout(wait),
			sandbox.WithIdleTimeout(sandbox.NoIdleTimeout), sandbox.WithHibernateAfter(sandbox.NoIdleTimeout))
		if err != nil {
			return queues, temporalerr.Failure(err)
		}
		held = append(held, sbx)
		queues = append(queues, sbx.Ref().Queue)
	}
	release, done := workflow.GetSignalChannel(ctx, "release"), workflow.GetSignalChannel(ctx, "done")
	for len(held) > 0 {
		stop := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(release, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.AddReceive(done, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); stop = true })
		sel.Select(ctx)
		if stop {
			break
		}
		if err := held[0].Stop(ctx); err != nil {
			return queues, err
		}
		held = held[1:]
	}
	for _, s := range held {
		s.Stop(ctx)
	}
	return queues, nil
}

// startHosts starts a worker for each host queue with the given most
// sandboxes, each with a linux provider of its own, all on one server
// and one blob store, and waits until each polls its queues.
func startHosts(t *testing.T, c client.Client, max map[string]int, wfs ...any) map[string]*hostworker.Worker {
	t.Helper()
	bucket := berthtest.Bucket(t)
	hosts := map[string]*hostworker.Worker{}
	for queue, n := range max {
		w, err := hostworker.StartWorker(c, hostworker.Options{
			Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)}, Outputs: bucket,
			Queue: sandbox.DefaultQueue, HostQueue: queue, MaxSandboxes: n,
			Workflows: wfs,
		})
		if err != nil {
			t.Fatal(err)
		}
		hosts[queue] = w
		t.Cleanup(w.Stop)
	}
	waitPolled(t, c, len(max))
	return hosts
}

// waitPolled waits until n hosts poll the linux provider's queue.
func waitPolled(t *testing.T, c client.Client, n int) {
	t.Helper()
	q := activities.ProviderQueue(sandbox.DefaultQueue, "linux")
	testkit.Eventually(t, fmt.Sprintf("%d hosts polling %s", n, q), 30*time.Second, func() bool {
		resp, err := c.DescribeTaskQueue(t.Context(), q, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		return err == nil && len(resp.GetPollers()) >= n
	})
}

func countBy(queues []string) map[string]int {
	n := map[string]int{}
	for _, q := range queues {
		n[q]++
	}
	return n
}

// queuesOf waits for a holdSandboxes workflow to have made n sandboxes
// and says where.
func queuesOf(t *testing.T, c client.Client, id string, n int) []string {
	t.Helper()
	var queues []string
	testkit.Eventually(t, fmt.Sprintf("%d sandboxes made by %s", n, id), time.Minute, func() bool {
		v, err := c.QueryWorkflow(t.Context(), id, "", "queues")
		return err == nil && v.Get(&queues) == nil && len(queues) >= n
	})
	return queues
}

// TestPlacement: two hosts serve linux. Sandboxes made one after the
// other spread evenly (least loaded first: a difference of at most
// one); a host that is full is skipped, not failed on; with every host
// full a creation waits, takes the room that frees up, and one that
// finds none within its placement timeout fails with Quota, saying so.
func TestPlacement(t *testing.T) {
	ctx := t.Context()
	c := server(t)

	t.Run("spread", func(t *testing.T) {
		c := server(t)
		startHosts(t, c, map[string]int{"berth@a": 10, "berth@b": 10}, holdSandboxes)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandboxes, 6, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.SignalWorkflow(ctx, run.GetID(), "", "done", nil)
		n := countBy(queuesOf(t, c, run.GetID(), 6))
		if n["berth@a"] != 3 || n["berth@b"] != 3 {
			t.Errorf("6 sandboxes on two empty hosts: %v; want 3 on each", n)
		}
	})

	// A burst: creations asking at the same moment read the same loads,
	// yet each is admitted only on a host still least loaded as it is
	// admitted (activities.Seen), so 6 on 3 empty hosts land 2, 2, 2.
	t.Run("burst", func(t *testing.T) {
		c := server(t)
		startHosts(t, c, map[string]int{"berth@a": 10, "berth@b": 10, "berth@c": 10}, holdSandboxes)
		const n = 6
		ids := make([]string, n)
		for i := range ids {
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandboxes, 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = run.GetID()
			defer c.SignalWorkflow(ctx, run.GetID(), "", "done", nil)
		}
		var queues []string
		for _, id := range ids {
			queues = append(queues, queuesOf(t, c, id, 1)...)
		}
		if got := countBy(queues); got["berth@a"] != 2 || got["berth@b"] != 2 || got["berth@c"] != 2 {
			t.Errorf("a burst of %d creations on three empty hosts: %v; want 2 on each", n, got)
		}
	})

	t.Run("full host skipped", func(t *testing.T) {
		c := server(t)
		startHosts(t, c, map[string]int{"berth@a": 1, "berth@b": 10}, holdSandboxes)
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandboxes, 5, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.SignalWorkflow(ctx, run.GetID(), "", "done", nil)
		n := countBy(queuesOf(t, c, run.GetID(), 5))
		if n["berth@a"] != 1 || n["berth@b"] != 4 {
			t.Errorf("5 sandboxes, a host of room for 1 and one of 10: %v; want 1 and 4", n)
		}
	})

	t.Run("every host full", func(t *testing.T) {
		startHosts(t, c, map[string]int{"berth@a": 1, "berth@b": 1}, holdSandboxes)
		full, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandboxes, 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.SignalWorkflow(ctx, full.GetID(), "", "done", nil)
		if n := countBy(queuesOf(t, c, full.GetID(), 2)); n["berth@a"] != 1 || n["berth@b"] != 1 {
			t.Fatalf("2 sandboxes on two hosts of room for 1: %v", n)
		}

		start := time.Now()
		refused, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandboxes, 1, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		err = refused.Get(ctx, nil)
		line := temporalerr.OneLine(err)
		if temporalerr.KindOf(err) != errdefs.Quota || !strings.Contains(line, `no host serving provider "linux" had room`) {
			t.Errorf("a creation with every host full: %s; want Quota, saying no host had room", line)
		}
		if took := time.Since(start); took < 3*time.Second || took > 30*time.Second {
			t.Errorf("it failed after %v; want after its 3s placement timeout", took)
		}

		waits, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, holdSandboxes, 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer c.SignalWorkflow(ctx, waits.GetID(), "", "done", nil)
		// It waits: the room it takes is made after it asked.
		testkit.Eventually(t, "the creation to ask for room", 30*time.Second, func() bool {
			desc, err := c.DescribeWorkflowExecution(ctx, waits.GetID(), "")
			return err == nil && desc.WorkflowExecutionInfo.GetHistoryLength() > 15
		})
		if err := c.SignalWorkflow(ctx, full.GetID(), "", "release", nil); err != nil {
			t.Fatal(err)
		}
		queues := queuesOf(t, c, waits.GetID(), 1)
		if queues[0] != "berth@a" && queues[0] != "berth@b" {
			t.Errorf("the waiting creation landed on %q", queues[0])
		}
	})
}
