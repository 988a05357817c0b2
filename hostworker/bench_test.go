package hostworker_test

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
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

// cpuTime is the CPU time this process (server, worker and client
// alike) has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time per operation since start: on a
// machine shared with other work it varies less than latency does.
func reportCPU(b *testing.B, start time.Duration, n int) {
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(n), "cpu-ms/op")
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
//
// Each reports median-ms, the latency, and cpu-ms/op, the CPU time the
// process (server, worker and client, not the sandbox) spent per
// command, which a shared machine disturbs less. "update" adds task-ms,
// the median workflow task from its start to its completion (see
// workflowTasks): the rest of median-ms is the server taking the Update
// in, dispatching its task and persisting its completion.
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
		cpu := cpuTime()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, execLoop, b.N)
		if err != nil {
			b.Fatal(err)
		}
		var took []time.Duration
		if err := run.Get(ctx, &took); err != nil {
			b.Fatal(err)
		}
		reportCPU(b, cpu, b.N)
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
		cpu := cpuTime()
		for b.Loop() {
			start := time.Now()
			exec()
			took = append(took, time.Since(start))
		}
		reportCPU(b, cpu, b.N)
		b.ReportMetric(median(took), "median-ms")
		b.ReportMetric(median(workflowTasks(b, c, id, run.GetRunID(), len(took))), "task-ms")
	})
	b.Run("direct", func(b *testing.B) {
		sb, err := p.Create(ctx, provider.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Destroy(ctx)
		var took []time.Duration
		cpu := cpuTime()
		for b.Loop() {
			start := time.Now()
			if _, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"/bin/true"}}); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		reportCPU(b, cpu, b.N)
		b.ReportMetric(median(took), "median-ms")
	})
}

// workflowTasks returns how long the last n workflow tasks of a run took
// from start to completion, by the server's stamps on their events: the
// task's way to the worker, the worker's work, and the way back. What
// else a command through an Update takes is the server's alone.
func workflowTasks(b *testing.B, c client.Client, id, runID string, n int) []time.Duration {
	var started time.Time
	var took []time.Duration
	it := c.GetWorkflowHistory(b.Context(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			b.Fatal(err)
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started = e.GetEventTime().AsTime()
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			took = append(took, e.GetEventTime().AsTime().Sub(started))
		}
	}
	return took[max(0, len(took)-n):]
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
