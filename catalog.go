package berth

import (
	"context"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// catalog asks the workers what only they know and what changes no
// sandbox, through the long-lived catalog workflow of a queue
// (workflows.Catalog), started by the first question: a question
// leaves no workflow behind. Client.Providers and Snapshots are its
// typed faces.
type catalog struct {
	c *Client
	// queue is the queue whose catalog is asked.
	queue string
}

// catalog returns the catalog of the default queue.
func (c *Client) catalog() *catalog { return &catalog{c: c, queue: sandbox.DefaultQueue} }

// providers says, of every host, which providers it serves, and why not
// the others its binary links.
func (k *catalog) providers(ctx context.Context) ([]sandbox.HostProviders, error) {
	var out []sandbox.HostProviders
	err := k.ask(ctx, workflows.UpdateProviders, &out)
	return out, err
}

// snapshots lists the snapshot store, or deletes from it the snapshots
// in.Delete names.
func (k *catalog) snapshots(ctx context.Context, in workflows.SnapshotsInput) (workflows.SnapshotsOutput, error) {
	var out workflows.SnapshotsOutput
	err := k.ask(ctx, workflows.UpdateSnapshots, &out, in)
	return out, err
}

func (k *catalog) ask(ctx context.Context, update string, out any, args ...any) error {
	start := client.StartWorkflowOptions{
		ID: workflows.CatalogID(k.queue), TaskQueue: k.queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            workflows.CatalogSummary(k.queue),
	}
	return k.c.updateWithStart(ctx, start, workflows.CatalogWorkflowName, workflows.CatalogInput{Queue: k.queue}, update, out, args...)
}

// updateWithStart runs an Update on the workflow start names, starting
// it with input if it is not running, and waits for its result. Sent
// again after a server restart, the Update runs once.
func (c *Client) updateWithStart(ctx context.Context, start client.StartWorkflowOptions, workflow string, input any, update string, out any, args ...any) error {
	updateID := NewID(update + "-")
	var h client.WorkflowUpdateHandle
	sent := false
	err := c.retry(ctx, func(ctx context.Context) error {
		op := c.temporal.NewWithStartWorkflowOperation(start, workflow, input)
		var err error
		h, err = c.temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
			StartWorkflowOperation: op,
			UpdateOptions: client.UpdateWorkflowOptions{
				UpdateID: updateID, UpdateName: update, Args: args,
				WaitForStage: client.WorkflowUpdateStageAccepted,
			},
		})
		sent = sent || err == nil || temporalerr.ServerUnavailable(err)
		return err
	})
	if err = c.unavailable(err, update+" on "+start.ID, sent, ""); err != nil {
		return err
	}
	return c.waitUpdate(ctx, h, update, out)
}
