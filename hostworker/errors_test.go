package hostworker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/workflows"
)

// startBerth starts a server and one worker serving berth's workflows over a
// linux provider, as berth dev does.
func startBerth(t *testing.T) client.Client {
	t.Helper()
	c := server(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)},
		Outputs:   berthtest.Bucket(t), Snapshots: snapshot.New(berthtest.Bucket(t)),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return c
}

func runWorkflow(ctx context.Context, t *testing.T, c client.Client, in workflows.RunInput) (client.WorkflowRun, error) {
	t.Helper()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run, in)
	if err != nil {
		t.Fatal(err)
	}
	var out workflows.RunOutput
	return run, run.Get(ctx, &out)
}

// activitiesScheduled counts the activities a workflow scheduled, by type.
func activitiesScheduled(t *testing.T, c client.Client, id string) map[string]int {
	t.Helper()
	n := map[string]int{}
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			n[a.GetActivityType().GetName()]++
		}
	}
	return n
}

// retried lists what a workflow tried more than once or waited on: an
// activity's attempts after its first, a workflow task that failed or
// timed out, a timer.
func retried(t *testing.T, c client.Client, id string) []string {
	t.Helper()
	var out []string
	sched := map[int64]string{}
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			sched[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 {
			out = append(out, fmt.Sprintf("%s attempt %d", sched[a.GetScheduledEventId()], a.GetAttempt()))
		}
		if ev.GetWorkflowTaskFailedEventAttributes() != nil || ev.GetWorkflowTaskTimedOutEventAttributes() != nil ||
			ev.GetTimerStartedEventAttributes() != nil {
			out = append(out, ev.GetEventType().String())
		}
	}
	return out
}

// checkOneLine checks that err renders as one line of the given kind,
// saying want once.
func checkOneLine(t *testing.T, err error, kind errdefs.Kind, want string) {
	t.Helper()
	line := temporalerr.OneLine(err)
	switch {
	case !strings.HasPrefix(line, string(kind)+": "):
		t.Errorf("OneLine = %q, want kind %s (from %v)", line, kind, err)
	case strings.Contains(line, "\n"):
		t.Errorf("OneLine = %q: more than one line", line)
	case strings.Count(line, want) != 1:
		t.Errorf("OneLine = %q, want %q said once", line, want)
	case strings.Contains(line, "retryable") || strings.Contains(line, "workflow execution error"):
		t.Errorf("OneLine = %q: the Temporal chain is left in", line)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && !appErr.NonRetryable() && kind != errdefs.Internal {
		t.Errorf("%s error is retryable: %v", kind, err)
	}
}

// TestBadInputOneLine: caller mistakes fail fast, final, typed, and read
// in one line: through a real server, as a front end gets them.
func TestBadInputOneLine(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)

	t.Run("run", func(t *testing.T) {
		tests := []struct {
			name string
			in   workflows.RunInput
			want string
		}{
			{"unknown provider", workflows.RunInput{Provider: "nimbus", Argv: []string{"true"}}, `"nimbus"`},
			{"1 MiB of memory", workflows.RunInput{Provider: "linux", Argv: []string{"true"}, Resources: provider.Resources{Memory: 1 << 20}}, "memory limit"},
			{"negative CPU", workflows.RunInput{Provider: "linux", Argv: []string{"true"}, Resources: provider.Resources{CPU: -1}}, "negative"},
			{"negative timeout", workflows.RunInput{Provider: "linux", Argv: []string{"true"}, Timeout: -time.Second}, "negative timeout"},
			{"file outside the workspace", workflows.RunInput{Provider: "linux", Argv: []string{"true"},
				Files: []provider.File{{Path: "../etc/x", Data: []byte("x")}}}, "../etc/x"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				run, err := runWorkflow(ctx, t, c, tt.in)
				checkOneLine(t, err, errdefs.BadInput, tt.want)
				// Fast: nothing was tried twice, and nothing waited.
				if again := retried(t, c, run.GetID()); len(again) > 0 {
					t.Errorf("bad input was retried: %v", again)
				}
				if n := activitiesScheduled(t, c, run.GetID()); n["Create"] > 0 && tt.in.Provider == "linux" {
					t.Errorf("bad input reached the provider: %v", n)
				}
			})
		}
	})

	t.Run("standalone", func(t *testing.T) {
		// An unknown snapshot fails the workflow that would start from it.
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
			workflows.SandboxInput{Provider: "linux", FromSnapshot: "no-such-snapshot"})
		if err != nil {
			t.Fatal(err)
		}
		checkOneLine(t, run.Get(ctx, nil), errdefs.NotFound, "no-such-snapshot")

		// A validator rejects a bad update before it enters history.
		sbx, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
			workflows.SandboxInput{Provider: "linux"})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CancelWorkflow(context.WithoutCancel(ctx), sbx.GetID(), "")
		for _, tt := range []struct {
			name, update string
			arg          any
			want         string
		}{
			{"exec outside the workspace", workflows.UpdateExec, workflows.ExecRequest{Shell: "true", Dir: "../.."}, `"../.."`},
			{"fork with 1 MiB", workflows.UpdateFork, workflows.ForkRequest{ID: "small-fork", Resources: provider.Resources{Memory: 1 << 20}}, "memory limit"},
			{"read outside the workspace", workflows.UpdateReadFile, workflows.PathRequest{Path: "/etc/passwd"}, "/etc/passwd"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				checkOneLine(t, update(ctx, c, sbx.GetID(), tt.update, tt.arg), errdefs.BadInput, tt.want)
			})
		}
		checkOneLine(t, update(ctx, c, "no-such-sandbox", workflows.UpdatePause, nil), errdefs.NotFound, "no-such-sandbox")
	})

	t.Run("canceled", func(t *testing.T) {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
			workflows.RunInput{Provider: "linux", Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		waitRunning(t, c, run.GetID())
		if err := c.CancelWorkflow(ctx, run.GetID(), ""); err != nil {
			t.Fatal(err)
		}
		checkOneLine(t, run.Get(ctx, nil), errdefs.Canceled, "canceled")
	})
}

// update runs an update and returns its failure.
func update(ctx context.Context, c client.Client, id, name string, arg any) error {
	var args []any
	if arg != nil {
		args = []any{arg}
	}
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: name, Args: args,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

// waitRunning waits until a Run's command has started.
func waitRunning(t *testing.T, c client.Client, id string) workflows.RunStatus {
	t.Helper()
	var st workflows.RunStatus
	testkit.Eventually(t, "the run's command to start", 30*time.Second, func() bool {
		v, err := c.QueryWorkflow(t.Context(), id, "", workflows.RunQuery)
		return err == nil && v.Get(&st) == nil && st.Sandbox != ""
	})
	return st
}

// TestRunLostIsFinal: a one-shot run whose sandbox dies mid-command
// fails, final, with SandboxLost saying so, and makes no second sandbox.
func TestRunLostIsFinal(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "linux", Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	st := waitRunning(t, c, run.GetID())
	berthtest.KillSandbox(t, st.Sandbox)
	err = run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != string(errdefs.SandboxLost) || !appErr.NonRetryable() {
		t.Fatalf("got %v, want a non-retryable %s", err, errdefs.SandboxLost)
	}
	checkOneLine(t, err, errdefs.SandboxLost, "lost mid-run")
	if n := activitiesScheduled(t, c, run.GetID()); n["Create"] != 1 {
		t.Errorf("%d sandboxes created, want 1", n["Create"])
	}
}
