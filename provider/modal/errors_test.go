package modal

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/berth-dev/berth/errdefs"
)

// TestClassify: every answer of Modal's, and every error of the SDK's,
// becomes a kind of berth's, in one line with no token in it.
func TestClassify(t *testing.T) {
	cfg := Config{TokenID: "ak-classify", TokenSecret: "as-classify-secret"}
	withRetry := func() error {
		st, _ := status.New(codes.ResourceExhausted, "rate limit exceeded, try again").WithDetails(pb.RPCRetryPolicy_builder{RetryAfterSecs: 2}.Build())
		return st.Err()
	}()
	for _, c := range []struct {
		err   error
		kind  error
		retry time.Duration
	}{
		{status.Error(codes.NotFound, "Sandbox not found"), errdefs.ErrNotFound, 0},
		{status.Error(codes.Unauthenticated, "Token ID or secret is invalid: ak-classify/as-classify-secret"), errdefs.ErrProviderAuth, 0},
		{status.Error(codes.PermissionDenied, "no access"), errdefs.ErrProviderAuth, 0},
		{status.Error(codes.ResourceExhausted, "workspace quota exceeded:\nat most 10 sandboxes"), errdefs.ErrQuota, 0},
		{status.Error(codes.ResourceExhausted, "Too many requests"), errdefs.ErrProviderUnavailable, 0},
		{withRetry, errdefs.ErrProviderUnavailable, 2 * time.Second},
		{status.Error(codes.Unavailable, "connection reset"), errdefs.ErrProviderUnavailable, 0},
		{status.Error(codes.DeadlineExceeded, "deadline"), errdefs.ErrProviderUnavailable, 0},
		{status.Error(codes.Internal, "boom"), errdefs.ErrProviderUnavailable, 0},
		{status.Error(codes.InvalidArgument, "timeout must be at most 24 hours"), errdefs.ErrBadInput, 0},
		{status.Error(codes.FailedPrecondition, "finished"), errdefs.ErrBadInput, 0},
		{status.Error(codes.AlreadyExists, "name taken"), errdefs.ErrAlreadyExists, 0},
		{status.Error(codes.Unimplemented, "no"), errdefs.ErrUnsupported, 0},
		{fmt.Errorf("failed to get auth token: %w", status.Error(codes.Unauthenticated, "bad token")), errdefs.ErrProviderAuth, 0},
		{modal.NotFoundError{Exception: "Sandbox with name 'x' not found"}, errdefs.ErrNotFound, 0},
		{modal.AlreadyExistsError{Exception: "exists"}, errdefs.ErrAlreadyExists, 0},
		{modal.InvalidError{Exception: "bad"}, errdefs.ErrBadInput, 0},
		{modal.ResourceExhaustedError{Exception: "Insufficient capacity"}, errdefs.ErrProviderUnavailable, 0},
		{modal.ConflictError{Exception: "finished"}, errdefs.ErrNotFound, 0},
		{modal.TimeoutError{Exception: "timed out"}, errdefs.ErrProviderUnavailable, 0},
		{context.Canceled, errdefs.ErrCanceled, 0},
		{errors.New("dial tcp: connection refused"), errdefs.ErrProviderUnavailable, 0},
	} {
		err := classify("op", c.err, cfg)
		if !errors.Is(err, c.kind) {
			t.Errorf("%v: %v, want %v", c.err, err, c.kind)
		}
		var e *Error
		if !errors.As(err, &e) || e.RetryAfter != c.retry {
			t.Errorf("%v: retry after %v, want %v", c.err, e.RetryAfter, c.retry)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, cfg.TokenSecret) || strings.Contains(msg, cfg.TokenID) {
			t.Errorf("%q: not one line free of the token", msg)
		}
	}
	if classify("op", nil, cfg) != nil {
		t.Error("no error classified as one")
	}
}
