package client

import (
	"context"
	"errors"

	"go.temporal.io/api/serviceerror"
	tclient "go.temporal.io/sdk/client"
)

// Update runs the Update name on workflow workflowID and waits for its
// result, which it stores in out (nil to drop it). updateID identifies
// the Update: sending it again while the server was away runs it once.
// Empty, one is made up.
func (c *Client) Update(ctx context.Context, workflowID, updateID, name string, out any, args ...any) error {
	if updateID == "" {
		updateID = NewID(name + "-")
	}
	sent := false
	err := c.retry(ctx, func(ctx context.Context) error {
		h, err := c.temporal.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{
			WorkflowID: workflowID, UpdateID: updateID, UpdateName: name, Args: args,
			WaitForStage: tclient.WorkflowUpdateStageCompleted,
		})
		sent = sent || err == nil || Unavailable(err)
		if err != nil {
			return err
		}
		return h.Get(ctx, out)
	})
	return c.unavailable(err, name+" on "+workflowID, sent, "")
}

// StartUpdate sends the Update and returns once the workflow has accepted
// it: the caller then follows it (see Exec) and waits for its result
// with WaitUpdate.
func (c *Client) StartUpdate(ctx context.Context, workflowID, updateID, name string, args ...any) error {
	sent := false
	err := c.retry(ctx, func(ctx context.Context) error {
		_, err := c.temporal.UpdateWorkflow(ctx, tclient.UpdateWorkflowOptions{
			WorkflowID: workflowID, UpdateID: updateID, UpdateName: name, Args: args,
			WaitForStage: tclient.WorkflowUpdateStageAccepted,
		})
		sent = sent || err == nil || Unavailable(err)
		return err
	})
	return c.unavailable(err, name+" on "+workflowID, sent, "")
}

// WaitUpdate waits for the result of an Update sent before, riding out
// server restarts; a restart can lose an Update that was not yet
// accepted, so it is sent again, with its id: it still runs once.
func (c *Client) WaitUpdate(ctx context.Context, workflowID, updateID, name string, out any, args ...any) error {
	return c.Update(ctx, workflowID, updateID, name, out, args...)
}

// Query runs a query on workflow workflowID (its latest run) and stores
// the answer in out.
func (c *Client) Query(ctx context.Context, workflowID, runID, name string, out any, args ...any) error {
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
// server was away.
func (c *Client) unavailable(err error, op string, mayHaveRun bool, hint string) error {
	if err == nil || !Unavailable(err) {
		return err
	}
	return &UnavailableError{Op: op, MayHaveRun: mayHaveRun, ResultHint: hint, Err: err}
}

// NotFound says whether err means the workflow (a sandbox, a run) does
// not exist.
func NotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}
