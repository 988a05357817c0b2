package berth

import (
	"context"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"
)

// update runs the Update name on workflow workflowID and waits for its
// result, which it stores in out (nil to drop it). updateID identifies
// the Update: sending it again while the server was away runs it once.
// Empty, one is made up.
func (c *Client) update(ctx context.Context, workflowID, updateID, name string, out any, args ...any) error {
	if updateID == "" {
		updateID = NewID(name + "-")
	}
	h, err := c.startUpdate(ctx, workflowID, updateID, name, args...)
	if err != nil {
		return err
	}
	return c.waitUpdate(ctx, h, name, out)
}

// startUpdate sends the Update and returns once the workflow has accepted
// it (or rejected it: the handle then holds the rejection): the caller
// then follows it (see Exec) and waits for its result with waitUpdate.
// Until it is accepted, a restart of the server can lose it: it is sent
// again, with its id.
func (c *Client) startUpdate(ctx context.Context, workflowID, updateID, name string, args ...any) (client.WorkflowUpdateHandle, error) {
	var h client.WorkflowUpdateHandle
	sent := false
	err := c.retry(ctx, func(ctx context.Context) error {
		var err error
		h, err = c.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: workflowID, UpdateID: updateID, UpdateName: name, Args: args,
			WaitForStage: client.WorkflowUpdateStageAccepted,
		})
		sent = sent || err == nil || temporalerr.ServerUnavailable(err)
		return err
	})
	return h, c.unavailable(err, name+" on "+workflowID, sent, "")
}

// waitUpdate waits for the result of an Update startUpdate sent, riding
// out server restarts: an accepted Update is in the history of the run
// that accepted it, and asking that run, not the workflow's latest,
// finds its result even after the workflow continued as new.
func (c *Client) waitUpdate(ctx context.Context, h client.WorkflowUpdateHandle, name string, out any) error {
	// Its result, or its rejection; while the server is away, the same
	// update's, asked again by id.
	first := true
	err := c.retry(ctx, func(ctx context.Context) error {
		if first {
			first = false
			return h.Get(ctx, out)
		}
		return c.temporal.GetWorkflowUpdateHandle(client.GetWorkflowUpdateHandleOptions{
			WorkflowID: h.WorkflowID(), RunID: h.RunID(), UpdateID: h.UpdateID(),
		}).Get(ctx, out)
	})
	return c.unavailable(err, name+" on "+h.WorkflowID(), true, "")
}

// query runs a query on workflow workflowID (its latest run) and stores
// the answer in out.
func (c *Client) query(ctx context.Context, workflowID, runID, name string, out any, args ...any) error {
	err := c.retry(ctx, func(ctx context.Context) error {
		v, err := c.temporal.QueryWorkflow(ctx, workflowID, runID, name, args...)
		if err != nil {
			return err
		}
		return v.Get(out)
	})
	return c.unavailable(err, "query "+name+" on "+workflowID, false, "")
}

// unavailable turns a retry's failure into an UnavailableError when the
// server was away; any other failure it gives the kind temporalerr reads
// in it, so that a caller tests it with errdefs.KindOf.
func (c *Client) unavailable(err error, op string, mayHaveRun bool, hint string) error {
	if err == nil {
		return nil
	}
	if !temporalerr.ServerUnavailable(err) {
		return temporalerr.Classify(err)
	}
	return &UnavailableError{Op: op, MayHaveRun: mayHaveRun, ResultHint: hint, Err: err}
}
