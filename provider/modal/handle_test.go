package modal_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc/codes"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/sandbox"
)

// TestHandleHibernate drives berth's sandbox handle over Modal: a
// hibernation is Modal's filesystem snapshot and berth's checkpoint,
// and the wake is made from the snapshot, the whole filesystem kept
// (the file outside the workspace too). When the snapshot fails, takes
// longer than its timeout, or has expired (by Modal's word, or by the
// clock the handle keeps), the wake is made from the checkpoint: the
// workspace is whole, what lay outside it is not. Either way nothing
// of the sandbox is left at Modal once it stops, snapshots included.
func TestHandleHibernate(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	for _, c := range []struct {
		name    string
		timeout string
		fault   *modalfake.Fault
		// during runs while the sandbox is hibernated.
		during func(ctx workflow.Context) error
		native bool
	}{
		{name: "native", timeout: "2m", native: true},
		{name: "snapshot fails", timeout: "2m",
			fault: &modalfake.Fault{Method: "TaskSnapshotFilesystem", Code: codes.FailedPrecondition, Message: "snapshot failed"}},
		{name: "snapshot times out", timeout: "2s",
			fault: &modalfake.Fault{Method: "TaskSnapshotFilesystem", Hold: make(chan struct{})}},
		{name: "expired at Modal", timeout: "2m", during: func(workflow.Context) error {
			imgs := f.SnapshotImages()
			if len(imgs) != 1 {
				return errors.New("no snapshot to expire")
			}
			return f.ExpireImage(imgs[0])
		}},
		// The snapshot lives an hour (snapshot-ttl below).
		{name: "expired by the clock", timeout: "2m", during: func(ctx workflow.Context) error {
			return workflow.Sleep(ctx, 2*time.Hour)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc := settings(t, f)
			pc["snapshot-ttl"], pc["snapshot-timeout"] = "1h", c.timeout
			env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"modal": openProvider(t, pc)})
			var want, got string
			var during struct {
				sandboxes, images int
				state             sandbox.State
			}
			wakes := f.Requests("ImageFromId")
			wf := func(ctx workflow.Context) error {
				sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "modal"},
					sandbox.WithIdleTimeout(sandbox.NoIdleTimeout), sandbox.WithHibernateAfter(sandbox.NoIdleTimeout))
				if err != nil {
					return err
				}
				defer sbx.Stop(ctx)
				if _, err := sbx.Exec(ctx, populateScript); err != nil {
					return err
				}
				res, err := sbx.Exec(ctx, stateScript)
				if err != nil {
					return err
				}
				want = res.Stdout
				if c.fault != nil {
					f.Inject(*c.fault)
				}
				if err := sbx.Hibernate(ctx); err != nil {
					return err
				}
				during.state, during.sandboxes, during.images = sbx.State(), f.Sandboxes(), len(f.SnapshotImages())
				if c.during != nil {
					if err := c.during(ctx); err != nil {
						return err
					}
				}
				res, err = sbx.Exec(ctx, stateScript)
				got = res.Stdout
				return err
			}
			env.RegisterWorkflow(wf)
			env.ExecuteWorkflow(wf)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			if during.state != sandbox.StateHibernated || during.sandboxes != 0 {
				t.Errorf("hibernated: the handle says %s, Modal runs %d sandboxes; want hibernated and none", during.state, during.sandboxes)
			}
			snapshotted := c.fault == nil
			if n := during.images; snapshotted && n != 1 || !snapshotted && n != 0 {
				t.Errorf("hibernated, Modal holds %d snapshots", n)
			}
			expect := woken(want)
			if !c.native {
				// Berth's checkpoint holds the workspace alone.
				expect = strings.Replace(expect, "outside\n", "no-outside\n", 1)
			}
			if got != expect {
				t.Errorf("woken:\n%s\nwant:\n%s", got, expect)
			}
			if c.name == "expired by the clock" && f.Requests("ImageFromId") != wakes {
				t.Error("a wake from a snapshot the handle knew expired asked Modal for it")
			}
			if n, imgs := f.Sandboxes(), f.SnapshotImages(); n != 0 || len(imgs) != 0 {
				t.Errorf("after Stop Modal runs %d sandboxes and holds snapshots %v", n, imgs)
			}
		})
	}
}
