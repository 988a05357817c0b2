package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestUnavailable(t *testing.T) {
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
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

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
