package temporalerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestServerUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{serviceerror.NewUnavailable("down"), true},
		{fmt.Errorf("update: %w", serviceerror.NewUnavailable("down")), true},
		{status.Error(codes.Unavailable, "connection refused"), true},
		{serviceerror.NewResourceExhausted(0, "busy"), true},
		{context.DeadlineExceeded, true},
		{serviceerror.NewNotFound("no such workflow"), false},
		{serviceerror.NewInvalidArgument("bad"), false},
		{errors.New("BadInput: no"), false},
		{nil, false},
	} {
		if got := ServerUnavailable(c.err); got != c.want {
			t.Errorf("ServerUnavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestWorkflowNotFound(t *testing.T) {
	if !WorkflowNotFound(fmt.Errorf("describe: %w", serviceerror.NewNotFound("no such workflow"))) {
		t.Error("the server's NotFound is not a workflow not found")
	}
	if WorkflowNotFound(temporal.NewApplicationError("no snapshot x", "NotFound")) {
		t.Error("a NotFound raised by a workflow is taken for the workflow's absence")
	}
}
