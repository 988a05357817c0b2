package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Failure turns an error of a handle (or of workflow code around one)
// into the error a workflow or an update fails with: a Temporal
// application error whose type is the error's errdefs.Kind, so that
// callers in any language see what went wrong. Only an internal error is
// retryable; bad input, a missing sandbox, a lost one will fail the same
// way again. A LostError carries the operations it lost as details.
// Cancellation and continue-as-new pass through, as Temporal needs them.
func Failure(err error) error {
	switch {
	case err == nil:
		return nil
	case temporal.IsCanceledError(err), workflow.IsContinueAsNewError(err):
		return err
	}
	var lost *LostError
	if errors.As(err, &lost) {
		return temporal.NewNonRetryableApplicationError(err.Error(), string(errdefs.SandboxLost), nil, lost.Lost)
	}
	kind := errdefs.KindOf(err)
	var appErr *temporal.ApplicationError
	if kind == errdefs.Internal && errors.As(err, &appErr) && errdefs.Kind(appErr.Type()).Known() {
		kind = errdefs.Kind(appErr.Type()) // typed by a workflow this one waited for
	}
	if kind == errdefs.Internal {
		return temporal.NewApplicationError(err.Error(), string(kind))
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), string(kind), nil)
}

// ErrorKind says what kind of failure err is, for a client of berth's
// workflows: err is what the Temporal client returned (a workflow's
// result, an update's, a query's, a start's). It is the type of the
// first application error in the chain that berth raised; Canceled,
// Terminated or Timeout when Temporal ended the workflow; NotFound and
// AlreadyExists for the server's own answers; Internal otherwise.
func ErrorKind(err error) errdefs.Kind {
	k, _ := describe(err)
	return k
}

// OneLine renders err, as a Temporal client got it back, in one line:
// "KIND: reason", the kind as ErrorKind says and the reason said once,
// without the chain of workflow, activity and application errors that
// each repeat it. Front ends print it.
func OneLine(err error) string {
	if err == nil {
		return ""
	}
	k, reason := describe(err)
	reason = strings.Join(strings.Fields(reason), " ") // one line
	return fmt.Sprintf("%s: %s", k, reason)
}

func describe(err error) (errdefs.Kind, string) {
	var (
		canceled   *temporal.CanceledError
		terminated *temporal.TerminatedError
		timeout    *temporal.TimeoutError
		notFound   *serviceerror.NotFound
		started    *serviceerror.WorkflowExecutionAlreadyStarted
	)
	// Berth's own application errors say most: the outermost one is the
	// workflow's, with the context it added.
	var innermost *temporal.ApplicationError
	for e := err; e != nil; e = errors.Unwrap(e) {
		if appErr, ok := e.(*temporal.ApplicationError); ok {
			if k := errdefs.Kind(appErr.Type()); k.Known() {
				return k, appErr.Message()
			}
			innermost = appErr
		}
	}
	switch {
	case errors.As(err, &canceled), errors.Is(err, context.Canceled):
		return errdefs.Canceled, "canceled"
	case errors.As(err, &terminated):
		return errdefs.Terminated, "terminated"
	case errors.As(err, &timeout):
		return errdefs.Timeout, fmt.Sprintf("timed out (%s)", timeout.TimeoutType())
	case errors.As(err, &notFound):
		return errdefs.NotFound, notFound.Error()
	case errors.As(err, &started):
		return errdefs.AlreadyExists, started.Error()
	case innermost != nil:
		return errdefs.Internal, innermost.Message()
	}
	// A plain error, from berth's own client code (wrapping a sentinel)
	// or from the network.
	return errdefs.KindOf(err), leaf(err).Error()
}

// leaf is the error at the end of err's chain when err is a wrapper of
// Temporal's, whose own message repeats its cause's; else err itself.
func leaf(err error) error {
	var wee *temporal.WorkflowExecutionError
	if !errors.As(err, &wee) {
		return err
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
