package temporalerr

import (
	"context"
	"errors"

	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// WorkflowNotFound says whether err is the server's answer that the
// workflow asked for (a sandbox, a run, a session) does not exist: not a
// NotFound raised by berth's code, which KindOf also reads as NotFound.
func WorkflowNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// ServerUnavailable says whether err means the server could not be
// reached or could not answer for now: what a restart of the server
// looks like to a client, and worth retrying.
func ServerUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		unavail *serviceerror.Unavailable
		dead    *serviceerror.DeadlineExceeded
		busy    *serviceerror.ResourceExhausted
		aborted *serviceerror.Aborted
		notRdy  *serviceerror.NamespaceUnavailable
		wfRdy   *serviceerror.WorkflowNotReady
	)
	if errors.As(err, &unavail) || errors.As(err, &dead) || errors.As(err, &busy) ||
		errors.As(err, &aborted) || errors.As(err, &notRdy) || errors.As(err, &wfRdy) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true // a call's own deadline; the caller's is checked apart
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if s, ok := status.FromError(e); ok {
			switch s.Code() {
			case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
				return true
			}
		}
	}
	return false
}
