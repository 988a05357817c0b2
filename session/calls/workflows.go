package calls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
)

// UpdateWorkflowInput is an Update one workflow sends another through
// the server (a workflow can only signal another by itself).
type UpdateWorkflowInput struct {
	WorkflowID string `json:"workflow_id"`
	Update     string `json:"update"`
	// UpdateID names the Update: the caller derives it from its own
	// state, so that a retried activity attaches to the Update its first
	// attempt sent instead of sending it again.
	UpdateID string          `json:"update_id"`
	Arg      json.RawMessage `json:"arg,omitempty"`
}

// UpdateWorkflow sends an Update to the latest run of a workflow and
// returns its result, as JSON. A workflow that is closed or unknown is
// NotFound; an Update the workflow refused or failed fails with the
// same type and message, non-retryable. Only a server that could not be
// reached is retried.
func (a *Activities) UpdateWorkflow(ctx context.Context, in UpdateWorkflowInput) (json.RawMessage, error) {
	if a.Client == nil {
		return nil, temporalerr.To(fmt.Errorf("%w: this worker has no Temporal client", errdefs.ErrUnsupported))
	}
	if in.WorkflowID == "" || in.Update == "" || in.UpdateID == "" {
		return nil, temporalerr.To(fmt.Errorf("%w: an update needs a workflow id, a name and an id", errdefs.ErrBadInput))
	}
	// An Update may take long (a workspace snapshot, a switch): the
	// heartbeat says the worker lives.
	stop := activities.Heartbeat(ctx)
	defer stop()
	opts := client.UpdateWorkflowOptions{WorkflowID: in.WorkflowID, UpdateName: in.Update, UpdateID: in.UpdateID,
		WaitForStage: client.WorkflowUpdateStageCompleted}
	if len(in.Arg) > 0 {
		opts.Args = []any{in.Arg}
	}
	handle, err := a.Client.UpdateWorkflow(ctx, opts)
	var res json.RawMessage
	if err == nil {
		err = handle.Get(ctx, &res)
	}
	return res, updateError(in, err)
}

// updateError types what an Update failed with.
func updateError(in UpdateWorkflowInput, err error) error {
	var notFound *serviceerror.NotFound
	var app *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &notFound):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("workflow %s has ended", in.WorkflowID), string(errdefs.NotFound), nil)
	case errors.As(err, &app):
		return temporal.NewNonRetryableApplicationError(strings.Join(strings.Fields(app.Message()), " "), string(temporalerr.KindOf(err)), nil)
	case errors.As(err, &canceled):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s of %s was canceled", in.Update, in.WorkflowID), string(errdefs.Canceled), nil)
	}
	return err // the server could not be reached: retried
}

// Workflow statuses, as WorkflowStatuses says them.
const (
	WorkflowRunning = "Running"
	WorkflowUnknown = "NotFound" // the server does not know it (any more)
)

// WorkflowStatuses says, for each workflow id, the status of its latest
// run: WorkflowRunning, or how it closed (Completed, Failed, Canceled,
// Terminated, TimedOut), or WorkflowUnknown.
func (a *Activities) WorkflowStatuses(ctx context.Context, ids []string) ([]string, error) {
	if a.Client == nil {
		return nil, temporalerr.To(fmt.Errorf("%w: this worker has no Temporal client", errdefs.ErrUnsupported))
	}
	statuses := make([]string, len(ids))
	for i, id := range ids {
		desc, err := a.Client.DescribeWorkflowExecution(ctx, id, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			statuses[i] = WorkflowUnknown
			continue
		case err != nil:
			return nil, fmt.Errorf("describe workflow %s: %w", id, err) // retried
		}
		switch st := desc.GetWorkflowExecutionInfo().GetStatus(); st {
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			statuses[i] = WorkflowRunning
		default:
			statuses[i] = st.String()
		}
	}
	return statuses, nil
}

// QueryWorkflowInput asks a workflow a Query without arguments.
type QueryWorkflowInput struct {
	WorkflowID string `json:"workflow_id"`
	Query      string `json:"query"`
}

// QueryWorkflow asks the latest run of a workflow a Query and returns
// its answer, as JSON; a workflow the server does not know is NotFound.
func (a *Activities) QueryWorkflow(ctx context.Context, in QueryWorkflowInput) (json.RawMessage, error) {
	if a.Client == nil {
		return nil, temporalerr.To(fmt.Errorf("%w: this worker has no Temporal client", errdefs.ErrUnsupported))
	}
	v, err := a.Client.QueryWorkflow(ctx, in.WorkflowID, "", in.Query)
	var res json.RawMessage
	if err == nil {
		err = v.Get(&res)
	}
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("workflow %s is unknown", in.WorkflowID), string(errdefs.NotFound), nil)
	}
	return res, err
}
