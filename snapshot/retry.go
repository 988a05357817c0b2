package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gocloud.dev/gcerrors"
)

// A blob store that stops answering (a restart, a network cut, a
// server that hangs) must neither fail a Save at its first refused
// request nor hang it: every request to the bucket is bounded by the
// request timeout, and one that fails in a way a retry may cure is
// tried again, with a backoff, until the retry bound has passed since
// the first failed attempt began. Then the Save (or Open, Stat...) fails with an
// error wrapping ErrUnavailable, having written no manifest: nothing
// is taken for a snapshot that is not whole.

// Defaults of WithRetry and WithRequestTimeout.
const (
	// DefaultRetry is how long a failing request is retried: a store
	// restarting, or a minute's network cut, is ridden out.
	DefaultRetry = 2 * time.Minute
	// DefaultRequestTimeout bounds one request, the transfer of one
	// chunk (at most 4 MiB) or manifest included: a store that hangs
	// is given up on after it, and asked again.
	DefaultRequestTimeout = time.Minute
)

// The backoff between attempts of a request.
const (
	retryFirst = 250 * time.Millisecond
	retryMax   = 5 * time.Second
)

// WithRetry sets how long a request the blob store fails (refused,
// failed, timed out) is retried before the operation fails with
// ErrUnavailable; zero means DefaultRetry, a negative value not at all.
// A Save then fails at most this plus one request timeout (and a
// backoff of at most 5 s) after the store stopped answering.
func WithRetry(d time.Duration) Option {
	return func(s *Store) {
		switch {
		case d > 0:
			s.retry = d
		case d < 0:
			s.retry = 0
		}
	}
}

// WithRequestTimeout bounds each request to the blob store; zero means
// DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.requestTimeout = d
		}
	}
}

// do runs req, what describes it for the error, each attempt under the
// request timeout, retrying what a retry may cure until s.retry has
// passed since the first failed attempt began.
func (s *Store) do(ctx context.Context, what string, req func(context.Context) error) error {
	var first time.Time // when the first attempt that failed began
	wait := retryFirst
	for attempt := 1; ; attempt++ {
		began := time.Now()
		actx, cancel := context.WithTimeout(ctx, s.requestTimeout)
		err := req(actx)
		cancel()
		if err == nil || !retryable(ctx, err) {
			return err
		}
		now := time.Now()
		if first.IsZero() {
			first = began
		}
		if now.Sub(first) >= s.retry {
			// The last error in words only: it may wrap a context's
			// deadline, which is no part of what this error is.
			return fmt.Errorf("%w: %s: the store did not answer for %v (%d attempts): %v",
				ErrUnavailable, what, now.Sub(first).Round(time.Second), attempt, err)
		}
		t := time.NewTimer(min(wait, s.retry-now.Sub(first)))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("snapshot: %s: %w", what, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, retryMax)
	}
}

// retryable says whether a request that failed with err may succeed
// when tried again: not when ctx, the caller's, is done, nor when the
// store answered that the object is not there, or that the request is
// not allowed, nor when what came back is corrupt.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, ErrCorrupt) || errors.Is(err, ErrBadInput) || errors.Is(err, ErrNotFound) {
		return false
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.AlreadyExists, gcerrors.InvalidArgument, gcerrors.PermissionDenied,
		gcerrors.FailedPrecondition, gcerrors.Unimplemented, gcerrors.Canceled:
		return false
	}
	return true
}
