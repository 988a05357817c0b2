package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/sandbox"
)

// CatalogInput configures the catalog of a queue.
type CatalogInput struct {
	// Queue is the queue whose hosts and snapshot store the catalog
	// asks; empty means sandbox.DefaultQueue.
	Queue string `json:"queue,omitempty"`
	// ContinueAfter continues the catalog as new after it has served
	// this many requests; zero means catalogRequests, or sooner when the
	// server suggests it.
	ContinueAfter int `json:"continue_after,omitempty"`
}

// catalogRequests is how many requests a catalog serves before it
// continues as new: a request is some 10 events.
const catalogRequests = 500

// The catalog's Updates and Query. Arguments and results are JSON.
const (
	UpdateProviders = "berth.catalog.providers" // nothing -> []sandbox.HostProviders
	UpdateSnapshots = "berth.catalog.snapshots" // SnapshotsInput -> SnapshotsOutput
	QueryCatalog    = "berth.catalog"           // -> CatalogStatus
)

// CatalogStatus says how many requests the catalog's current run has
// served.
type CatalogStatus struct {
	Served int `json:"served"`
}

// CatalogID is the workflow id of the catalog of queue.
func CatalogID(queue string) string {
	if queue == "" || queue == sandbox.DefaultQueue {
		return "berth-catalog"
	}
	return "berth-catalog-" + queue
}

// Catalog (berth.Catalog) answers front ends' questions that only
// workers can, and that change nothing of a sandbox: which providers
// every host serves (UpdateProviders), and the snapshot store's list,
// or a deletion from it (UpdateSnapshots). There is one per queue,
// long-lived, started by the first question (update-with-start), so
// that a question leaves no workflow behind. It continues as new now
// and then, once the requests under way have been answered.
func Catalog(ctx workflow.Context, in CatalogInput) error {
	if in.Queue == "" {
		in.Queue = sandbox.DefaultQueue
	}
	keepDetails(ctx, CatalogSummary(in.Queue))
	limit := in.ContinueAfter
	if limit <= 0 {
		limit = catalogRequests
	}
	var st CatalogStatus
	if err := workflow.SetQueryHandler(ctx, QueryCatalog, func() (CatalogStatus, error) { return st, nil }); err != nil {
		return err
	}
	err := workflow.SetUpdateHandler(ctx, UpdateProviders, func(ctx workflow.Context) ([]sandbox.HostProviders, error) {
		st.Served++
		return Providers(ctx, ProvidersInput{Queue: in.Queue})
	})
	if err != nil {
		return err
	}
	err = workflow.SetUpdateHandler(ctx, UpdateSnapshots, func(ctx workflow.Context, req SnapshotsInput) (SnapshotsOutput, error) {
		st.Served++
		return snapshots(ctx, in.Queue, req)
	})
	if err != nil {
		return err
	}
	err = workflow.Await(ctx, func() bool {
		return (st.Served >= limit || workflow.GetInfo(ctx).GetContinueAsNewSuggested()) && workflow.AllHandlersFinished(ctx)
	})
	if err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, CatalogWorkflowName, CatalogInput{Queue: in.Queue, ContinueAfter: in.ContinueAfter})
}
