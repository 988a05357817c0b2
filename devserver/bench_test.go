package devserver_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/devserver"
)

// BenchmarkActivityRoundTrip measures one activity called from a workflow:
// schedule, run, complete, and the workflow task that schedules the next.
// Each op is one activity in a sequence run by a single workflow. Besides
// ns/op (wall time over all ops, workflow start and end included) it reports
// the median and p90 of the intervals between successive activity starts.
//
// "stock-transfer-poll-rps" puts history.transferProcessorMaxPollRPS back to
// the server's default, to show what berth's tuning is worth.
func BenchmarkActivityRoundTrip(b *testing.B) {
	cases := []struct {
		name          string
		dynamicConfig map[string]any
		local         bool
	}{
		{name: "tuned"},
		{name: "stock-transfer-poll-rps", dynamicConfig: map[string]any{"history.transferProcessorMaxPollRPS": 20}},
		{name: "local-activity", local: true},
	}
	for _, bc := range cases {
		// One server per case, shared by the runs the testing package makes
		// with growing b.N; it lives as long as the parent benchmark.
		var c client.Client
		var tq string
		b.Run(bc.name, func(sub *testing.B) {
			if c == nil {
				c, tq = benchServer(b, sub, bc.dynamicConfig)
			}
			runSequence(sub, c, tq, bc.local)
		})
	}
}

// benchServer starts a server and a worker that outlive sub: the parent
// benchmark owns them.
func benchServer(parent, sub *testing.B, dynamicConfig map[string]any) (client.Client, string) {
	tb := ownedBy{B: sub, parent: parent}
	srv, err := devserver.Start(sub.Context(), devserver.Options{
		DataDir:       tb.TempDir(),
		Address:       "127.0.0.1:0",
		Logger:        testLogger(),
		DynamicConfig: dynamicConfig,
	})
	if err != nil {
		sub.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Stop() })
	c := dial(tb, srv.ClientOptions())
	tq := newTaskQueue()
	startWorker(tb, c, tq)
	return c, tq
}

// ownedBy reports failures on the running sub-benchmark but ties cleanup
// and temporary directories to its parent, which outlives every run.
type ownedBy struct {
	*testing.B
	parent *testing.B
}

func (o ownedBy) Cleanup(f func()) { o.parent.Cleanup(f) }
func (o ownedBy) TempDir() string  { return o.parent.TempDir() }

// maxPerWorkflow keeps each workflow's history far below the server's
// event count limits whatever b.N is.
const maxPerWorkflow = 1000

func runSequence(b *testing.B, c client.Client, tq string, local bool) {
	ctx := b.Context()
	var intervals []time.Duration
	b.ResetTimer()
	for left := b.N; left > 0; {
		n := min(left, maxPerWorkflow)
		left -= n
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, sequenceWorkflow, n, local)
		if err != nil {
			b.Fatal(err)
		}
		var starts []int64
		if err := run.Get(ctx, &starts); err != nil {
			b.Fatal(err)
		}
		for i := 1; i < len(starts); i++ {
			intervals = append(intervals, time.Duration(starts[i]-starts[i-1]))
		}
	}
	b.StopTimer()
	if len(intervals) > 0 {
		slices.Sort(intervals)
		b.ReportMetric(float64(intervals[len(intervals)/2].Nanoseconds()), "median-ns/op")
		b.ReportMetric(float64(intervals[len(intervals)*9/10].Nanoseconds()), "p90-ns/op")
	}
}

// sequenceWorkflow runs n activities one after the other, local ones or
// not, and returns when each started, by the worker's clock.
func sequenceWorkflow(ctx workflow.Context, n int, local bool) ([]int64, error) {
	ctx = activityOptions(ctx)
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	starts := make([]int64, 0, n)
	for range n {
		var t int64
		f := workflow.ExecuteActivity(ctx, now)
		if local {
			f = workflow.ExecuteLocalActivity(ctx, now)
		}
		if err := f.Get(ctx, &t); err != nil {
			return nil, err
		}
		starts = append(starts, t)
	}
	return starts, nil
}

func now(context.Context) (int64, error) {
	return time.Now().UnixNano(), nil
}
