package hostworker_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// execLoop runs n commands in one sandbox and measures, from inside the
// workflow, how long each took to come back.
func execLoop(ctx workflow.Context, n int) ([]time.Duration, error) {
	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
	if err != nil {
		return nil, err
	}
	defer sbx.Stop(ctx)
	// The start times of the workflow tasks around each command: no
	// marker in history, so the measure does not slow what it measures.
	now := func() time.Time { return workflow.Now(ctx) }
	var took []time.Duration
	for range n {
		start := now()
		if _, err := sbx.ExecArgv(ctx, []string{"/bin/true"}); err != nil {
			return nil, err
		}
		took = append(took, now().Sub(start))
	}
	return took, nil
}

func median(d []time.Duration) float64 {
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// BenchmarkDurableExec measures an Exec of /bin/true from inside a
// workflow on the embedded server, the result back in the workflow
// ("temporal": commands one after another, each a local activity run
// within the same workflow task); the same as a Workflow Update on a
// standalone sandbox's workflow, which is what berth sandbox exec and
// SDK clients do ("update": client to server to workflow task and back,
// each command its own workflow task); and the same command through the
// provider directly.
func BenchmarkDurableExec(b *testing.B) {
	ctx := b.Context()
	c := server(b)
	p := berthtest.Provider(b)
	bucket := berthtest.Bucket(b)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: bucket,
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Workflows: []any{execLoop},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	b.Run("temporal", func(b *testing.B) {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, execLoop, b.N)
		if err != nil {
			b.Fatal(err)
		}
		var took []time.Duration
		if err := run.Get(ctx, &took); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(median(took), "median-ms")
	})
	b.Run("update", func(b *testing.B) {
		id := fmt.Sprintf("bench-%d", time.Now().UnixNano())
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue},
			workflows.Sandbox, workflows.SandboxInput{Provider: "linux"})
		if err != nil {
			b.Fatal(err)
		}
		defer func() {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateStop,
				WaitForStage: client.WorkflowUpdateStageCompleted})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			if err != nil {
				b.Errorf("stop the sandbox: %v", err)
			}
		}()
		exec := func() {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: id, RunID: run.GetRunID(), UpdateName: workflows.UpdateExec,
				Args: []any{workflows.ExecRequest{Argv: []string{"/bin/true"}}}, WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err != nil {
				b.Fatal(err)
			}
			var out workflows.RunOutput
			if err := h.Get(ctx, &out); err != nil {
				b.Fatal(err)
			}
		}
		exec() // the sandbox is ready
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			exec()
			took = append(took, time.Since(start))
		}
		b.ReportMetric(median(took), "median-ms")
	})
	b.Run("direct", func(b *testing.B) {
		sb, err := p.Create(ctx, provider.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Destroy(ctx)
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"/bin/true"}}); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		b.ReportMetric(median(took), "median-ms")
	})
}

// BenchmarkCreateExec measures what berth run waits for: from the start
// of a Run workflow of /bin/true on a linux sandbox to its result, read
// through the run's result Update (the sandbox's destruction follows,
// untimed). "dev" is one host serving everything on one queue, as berth
// dev runs; "cluster" is one host of a cluster, with a host queue of its
// own.
func BenchmarkCreateExec(b *testing.B) {
	for _, bc := range []struct{ name, hostQueue string }{
		{"dev", sandbox.DefaultQueue},
		{"cluster", sandbox.DefaultQueue + "@a"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := b.Context()
			c := server(b)
			w, err := hostworker.StartWorker(c, hostworker.Options{
				Providers: map[string]provider.Provider{"linux": berthtest.Provider(b)}, Outputs: berthtest.Bucket(b),
				Queue: sandbox.DefaultQueue, HostQueue: bc.hostQueue,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			in := workflows.RunInput{Provider: "linux", Argv: []string{"/bin/true"}}
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("create-%d", i), TaskQueue: sandbox.DefaultQueue}, workflows.Run, in)
				if err != nil {
					b.Fatal(err)
				}
				h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), RunID: run.GetRunID(),
					UpdateName: workflows.UpdateRunResult, WaitForStage: client.WorkflowUpdateStageCompleted})
				if err != nil {
					b.Fatal(err)
				}
				var out workflows.RunOutput
				if err := h.Get(ctx, &out); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
				if err := run.Get(ctx, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(median(took), "median-ms")
		})
	}
}
