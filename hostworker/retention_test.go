package hostworker_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/workflows"
)

// TestOutputsGoAfterTheirOwner: runs store their outputs in the blob
// store; the reaper keeps them for the retention after their run closed,
// then removes them all, while a running sandbox's stay.
func TestOutputsGoAfterTheirOwner(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	outputs := berthtest.Bucket(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)},
		Outputs:   outputs, Snapshots: snapshot.New(berthtest.Bucket(t)),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// Outputs too large to travel inline are stored.
	big := workflows.RunInput{Provider: "linux", Argv: []string{"sh", "-c", "seq 1 200000"}}
	for range 3 {
		if _, err := runWorkflow(ctx, t, c, big); err != nil {
			t.Fatal(err)
		}
	}
	// A sandbox that lives on, with a stored output of its own.
	live, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "live-sbx", TaskQueue: sandbox.DefaultQueue},
		workflows.Sandbox, workflows.SandboxInput{Provider: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CancelWorkflow(context.WithoutCancel(ctx), live.GetID(), "")
	execIn(t, c, live.GetID(), workflows.ExecRequest{Shell: "seq 1 200000"})

	stored := func() map[string]int {
		n := map[string]int{}
		it := outputs.List(&blob.ListOptions{})
		for {
			obj, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			n[strings.SplitN(obj.Key, "/", 3)[1]]++ // by sandbox
		}
	}
	reap := func(retention time.Duration) {
		t.Helper()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue},
			workflows.Reaper, workflows.ReaperInput{Queue: sandbox.DefaultQueue, OutputRetention: retention})
		if err != nil {
			t.Fatal(err)
		}
		var report sandbox.ReapReport
		if err := run.Get(ctx, &report); err != nil {
			t.Fatal(err)
		}
	}
	before := stored()
	if len(before) != 4 {
		t.Fatalf("outputs of %d sandboxes stored, want 4 (3 runs, 1 sandbox): %v", len(before), before)
	}
	reap(time.Hour) // the runs closed a moment ago: kept
	if after := stored(); len(after) != 4 {
		t.Fatalf("within the retention, outputs of %d sandboxes left, want 4: %v", len(after), after)
	}
	reap(time.Nanosecond)
	after := stored()
	if len(after) != 1 {
		t.Fatalf("past the retention, outputs of %d sandboxes left, want only the live one's: %v", len(after), after)
	}
	st := sandboxStatus(t, c, live.GetID())
	if after[st.ID] == 0 {
		t.Errorf("the live sandbox %s lost its outputs: %v", st.ID, after)
	}
}
