package hostworker_test

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
)

// hostLostReport is what moveOnHostLoss saw.
type hostLostReport struct {
	Before, After string // the sandbox's queue before and after its host went
	Lost          []string
	Files         string
}

// moveOnHostLoss writes a file (checkpointed), waits for the signal that
// its host is gone, then runs a command: the sandbox is found lost and
// re-created on another host from its checkpoint.
func moveOnHostLoss(ctx workflow.Context) (hostLostReport, error) {
	var r hostLostReport
	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"}, sandbox.WithHostTimeout(3*time.Second),
		sandbox.WithCheckpointEvery(1), sandbox.WithIdleTimeout(sandbox.NoIdleTimeout), sandbox.WithHibernateAfter(sandbox.NoIdleTimeout))
	if err != nil {
		return r, err
	}
	defer sbx.Stop(ctx)
	// The query names the sandbox's host once its file is checkpointed.
	if err := workflow.SetQueryHandler(ctx, "queue", func() (string, error) { return r.Before, nil }); err != nil {
		return r, err
	}
	if err := sbx.WriteFiles(ctx, provider.File{Path: "kept", Data: []byte("kept\n")}); err != nil {
		return r, err
	}
	r.Before = sbx.Ref().Queue
	workflow.GetSignalChannel(ctx, "host-gone").Receive(ctx, nil)
	_, err = sbx.Exec(ctx, "true")
	var lost *sandbox.LostError
	if !errors.As(err, &lost) || !lost.Recovered {
		return r, errors.New("want a recovered LostError, got " + errString(err))
	}
	r.Lost = lost.Lost
	res, err := sbx.Exec(ctx, "cat kept")
	r.Files, r.After = res.Stdout, sbx.Ref().Queue
	return r, err
}

// TestHostLost: two hosts serve one server; the host of a sandbox goes
// away (its worker stops), and the sandbox's next operation, finding no
// worker for that host within the host timeout, re-creates it on the
// other host from its checkpoint.
func TestHostLost(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	// One blob store for both hosts, as an s3:// bucket would be.
	bucket := berthtest.Bucket(t)
	store := snapshot.New(berthtest.Bucket(t))

	hosts := map[string]*hostworker.Worker{}
	for _, name := range []string{"a", "b"} {
		p := berthtest.Provider(t)
		w, err := hostworker.StartWorker(c, hostworker.Options{
			Providers: map[string]provider.Provider{"linux": p}, Outputs: bucket, Snapshots: store,
			Queue: sandbox.DefaultQueue, HostQueue: "berth@" + name,
			Workflows: []any{moveOnHostLoss},
		})
		if err != nil {
			t.Fatal(err)
		}
		hosts["berth@"+name] = w
	}
	defer func() {
		for _, w := range hosts {
			w.Stop()
		}
	}()

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, moveOnHostLoss)
	if err != nil {
		t.Fatal(err)
	}
	var first string
	testkit.Eventually(t, "the sandbox to be created", 30*time.Second, func() bool {
		v, err := c.QueryWorkflow(ctx, run.GetID(), "", "queue")
		return err == nil && v.Get(&first) == nil && first != ""
	})
	hosts[first].Stop() // the host is gone: nobody serves its queue
	delete(hosts, first)
	if err := c.SignalWorkflow(ctx, run.GetID(), "", "host-gone", nil); err != nil {
		t.Fatal(err)
	}
	var r hostLostReport
	if err := run.Get(ctx, &r); err != nil {
		t.Fatal(err)
	}
	if r.Before != first || r.After == first || r.After == "" {
		t.Errorf("the sandbox went from %q to %q; want it moved off %q", r.Before, r.After, first)
	}
	if r.Files != "kept\n" || len(r.Lost) != 0 {
		t.Errorf("recovered workspace: %q, lost %q; want the checkpointed file and nothing lost", r.Files, r.Lost)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
