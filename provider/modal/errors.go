package modal

import (
	"context"
	"errors"
	"strings"
	"time"

	modal "github.com/modal-labs/modal-client/go"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
)

// Error is a call Modal refused or could not answer. It wraps the
// errdefs kind the answer means, so errors.Is(err, errdefs.ErrQuota) and
// the like classify it, and its message is one line that never holds
// the token. Status is 0: Modal answers in gRPC codes, which the message
// names.
type Error = svcerr.Error

// rateMarkers are how Modal words a ResourceExhausted that passes (a
// rate limit) rather than the workspace's limits, which stay.
var rateMarkers = []string{"rate limit", "too many requests", "try again", "retry", "throttl"}

// classify turns an error of the SDK into an Error of berth's kinds.
func (a *API) classify(op string, err error) error { return classify(op, err, a.cfg) }

func classify(op string, err error, cfg Config) error {
	if err == nil {
		return nil
	}
	e := &Error{Service: Name, Op: op}
	var (
		nf  modal.NotFoundError
		ae  modal.AlreadyExistsError
		re  modal.ResourceExhaustedError
		inv modal.InvalidError
		ce  modal.ConflictError
		cc  modal.ClientClosedError
		to  modal.TimeoutError
		sto modal.SandboxTimeoutError
		eto modal.ExecTimeoutError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &nf):
		e.Kind = errdefs.ErrNotFound
	case errors.As(err, &ae):
		e.Kind = errdefs.ErrAlreadyExists
	case errors.As(err, &re):
		// The SDK's own: no task was scheduled in time.
		e.Kind = errdefs.ErrProviderUnavailable
	case errors.As(err, &inv):
		e.Kind = errdefs.ErrBadInput
	case errors.As(err, &ce):
		// The sandbox finished already.
		e.Kind = errdefs.ErrNotFound
	case errors.As(err, &cc):
		e.Kind = errdefs.ErrProviderUnavailable
	case errors.As(err, &to), errors.As(err, &sto), errors.As(err, &eto):
		e.Kind = errdefs.ErrProviderUnavailable
	default:
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			msg = st.Code().String() + ": " + st.Message()
			e.Kind = kindOf(st.Code(), st.Message())
			if st.Code() == codes.ResourceExhausted {
				e.RetryAfter = retryAfter(st)
			}
		} else if errors.Is(err, context.Canceled) {
			e.Kind = errdefs.ErrCanceled
		} else {
			// No answer, or an answer the SDK could not take.
			e.Kind = errdefs.ErrProviderUnavailable
		}
	}
	e.Message = oneLine(scrub(msg, cfg))
	return e
}

// kindOf is what a gRPC code means.
func kindOf(c codes.Code, msg string) error {
	switch c {
	case codes.NotFound:
		return errdefs.ErrNotFound
	case codes.PermissionDenied, codes.Unauthenticated:
		return errdefs.ErrProviderAuth
	case codes.ResourceExhausted:
		lower := strings.ToLower(msg)
		for _, m := range rateMarkers {
			if strings.Contains(lower, m) {
				return errdefs.ErrProviderUnavailable
			}
		}
		return errdefs.ErrQuota
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return errdefs.ErrBadInput
	case codes.AlreadyExists:
		return errdefs.ErrAlreadyExists
	case codes.Unimplemented:
		return errdefs.ErrUnsupported
	case codes.Canceled:
		return errdefs.ErrCanceled
	}
	// Unavailable, DeadlineExceeded, Internal, Aborted, DataLoss.
	return errdefs.ErrProviderUnavailable
}

// retryAfter is the wait Modal's retry policy detail asks for, if any.
func retryAfter(st *status.Status) time.Duration {
	for _, d := range st.Details() {
		if p, ok := d.(*pb.RPCRetryPolicy); ok && p.GetRetryAfterSecs() > 0 {
			return time.Duration(float64(p.GetRetryAfterSecs()) * float64(time.Second))
		}
	}
	return 0
}

// scrub removes both halves of the token from s.
func scrub(s string, cfg Config) string {
	return svcerr.Scrub(svcerr.Scrub(s, cfg.TokenSecret), cfg.TokenID)
}

func oneLine(s string) string { return svcerr.OneLine(s) }
