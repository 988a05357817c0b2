package agent

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent/model"
)

// ModelStatusWorkflowName is the name ModelStatus is registered under.
const ModelStatusWorkflowName = "berth.agent.ModelStatus"

// ModelStatusInput names the model's queue; empty means
// DefaultModelQueue.
type ModelStatusInput struct {
	ModelQueue string `json:"model_queue,omitempty"`
}

// Bounds of ModelStatus: how long a worker has to take the question,
// and to answer it (model.Check's own bound, and some room).
const (
	modelAnswerTimeout = 5 * time.Second
	modelCheckTimeout  = 20 * time.Second
)

// ModelStatus is CheckModel as a workflow of its own, a workflow each
// time: front ends ask the session manager instead
// (session.UpdateModelStatus), and it stays registered for older ones.
func ModelStatus(ctx workflow.Context, in ModelStatusInput) (model.Status, error) {
	return CheckModel(ctx, in.ModelQueue), nil
}

// CheckModel asks a worker serving the model's queue (DefaultModelQueue
// when empty) what it finds of its model now (ready, unknown,
// unavailable and why, or none): how front ends (berth providers) show
// the model beside the providers. A queue no worker takes the question
// from within a few seconds is unavailable.
func CheckModel(ctx workflow.Context, queue string) model.Status {
	if queue == "" {
		queue = DefaultModelQueue
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              queue,
		ScheduleToStartTimeout: modelAnswerTimeout,
		StartToCloseTimeout:    modelCheckTimeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var st model.Status
	err := workflow.ExecuteActivity(ctx, model.StatusActivityName).Get(ctx, &st)
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return model.Status{State: model.Unavailable, Reason: fmt.Sprintf("no worker serves the model's queue %s within %v", queue, modelAnswerTimeout)}
	case err != nil:
		return model.Status{State: model.Unavailable, Reason: err.Error()}
	}
	return st
}
