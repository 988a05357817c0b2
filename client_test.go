package berth

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"go.temporal.io/sdk/temporal"

	"go.temporal.io/api/serviceerror"
)

// TestRetry: a call is tried again while the server is unavailable, and
// given up on after RetryFor; other errors are final at once.
func TestRetry(t *testing.T) {
	c := New(nil, WithRetryFor(300*time.Millisecond))
	calls := 0
	err := c.retry(t.Context(), func(context.Context) error {
		calls++
		if calls < 3 {
			return serviceerror.NewUnavailable("restarting")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("through a short outage: %v after %d calls, want success after 3", err, calls)
	}

	start := time.Now()
	err = c.unavailable(c.retry(t.Context(), func(context.Context) error {
		return serviceerror.NewUnavailable("gone")
	}), "exec on sbx-1", true, "berth sandbox inspect sbx-1")
	var gone *UnavailableError
	if !errors.As(err, &gone) || !gone.MayHaveRun || time.Since(start) < 300*time.Millisecond {
		t.Errorf("a long outage: %v after %v; want an UnavailableError saying it may have run, after 300ms", err, time.Since(start))
	}

	calls = 0
	err = c.retry(t.Context(), func(context.Context) error {
		calls++
		return serviceerror.NewInvalidArgument("bad input")
	})
	if err == nil || calls != 1 {
		t.Errorf("bad input: %v after %d calls, want it at once", err, calls)
	}
}

// TestErrorsHaveKinds: what the client's calls return, a program tests
// with errdefs.KindOf alone, without knowing Temporal's errors.
func TestErrorsHaveKinds(t *testing.T) {
	c := New(nil)
	for _, tc := range []struct {
		name string
		err  error
		want errdefs.Kind
	}{
		{"no workflow", serviceerror.NewNotFound("workflow not found for ID: sbx-1"), errdefs.NotFound},
		{"an update's failure", fmt.Errorf("update: %w", temporal.NewNonRetryableApplicationError("path /x is outside /workspace", "BadInput", nil)), errdefs.BadInput},
		{"started", serviceerror.NewWorkflowExecutionAlreadyStarted("started", "", ""), errdefs.AlreadyExists},
		{"other", errors.New("odd"), errdefs.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.unavailable(tc.err, "exec on sbx-1", false, "")
			if k := errdefs.KindOf(err); k != tc.want {
				t.Errorf("errdefs.KindOf = %s, want %s", k, tc.want)
			}
			if err.Error() != tc.err.Error() {
				t.Errorf("message %q, want %q", err, tc.err)
			}
		})
	}
}
