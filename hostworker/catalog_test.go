package hostworker_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestCatalogContinuesAsNew: the catalog answers providers and
// snapshots questions from many front ends at once, continues as new
// every few requests, and loses none of them across a continue-as-new;
// one catalog runs throughout.
func TestCatalogContinuesAsNew(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	id := workflows.CatalogID(sandbox.DefaultQueue)
	// Started as the first question would, but continuing every 3.
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue},
		workflows.CatalogWorkflowName, workflows.CatalogInput{ContinueAfter: 3}); err != nil {
		t.Fatal(err)
	}
	// Hosts are the activity pollers the server lists: the worker must
	// have polled once before the first question.
	testkit.Eventually(t, "the host polling "+sandbox.DefaultQueue, 30*time.Second, func() bool {
		resp, err := c.DescribeTaskQueue(ctx, sandbox.DefaultQueue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		return err == nil && len(resp.GetPollers()) > 0
	})
	cl := berth.New(c, berth.WithRetryFor(-1))
	const rounds, asks = 4, 3
	errs := make(chan error, rounds*asks)
	for range rounds {
		var wg sync.WaitGroup
		wg.Go(func() {
			hosts, err := cl.Providers(ctx)
			if err == nil && (len(hosts) != 1 || len(hosts[0].Providers) == 0) {
				err = fmt.Errorf("providers: %+v, want one host with linux", hosts)
			}
			errs <- err
		})
		wg.Go(func() {
			_, err := cl.Snapshots().List(ctx)
			errs <- err
		})
		wg.Go(func() {
			_, failed, err := cl.Snapshots().Remove(ctx, "missing", "../bad")
			if err == nil && (len(failed) != 2 || failed[0].Kind != berth.NotFound || failed[1].Kind != berth.BadInput) {
				err = fmt.Errorf("delete: %+v, want NotFound and BadInput", failed)
			}
			errs <- err
		})
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Visibility lags: a run that has just continued as new may still
	// be listed as running for a moment.
	var running, continued int
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: "WorkflowId = '" + id + "'"})
		if err != nil {
			t.Fatal(err)
		}
		running, continued = 0, 0
		var wrong []string
		for _, e := range resp.Executions {
			switch e.GetStatus() {
			case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
				running++
			case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
				continued++
			default:
				wrong = append(wrong, "a run of the catalog ended "+e.GetStatus().String())
			}
			if e.GetType().GetName() != workflows.CatalogWorkflowName {
				wrong = append(wrong, "a run of the catalog is a "+e.GetType().GetName())
			}
		}
		for _, w := range wrong {
			t.Error(w)
		}
		if running == 1 && continued >= rounds*asks/3-1 || len(wrong) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if running != 1 || continued < rounds*asks/3-1 {
		t.Errorf("catalog runs: %d running, %d continued as new; want 1 running, at least %d continued", running, continued, rounds*asks/3-1)
	}
	var st workflows.CatalogStatus
	v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryCatalog)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil || st.Served >= 3 {
		t.Errorf("the current run served %d (%v); want fewer than 3", st.Served, err)
	}
}
