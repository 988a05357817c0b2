// Package temporalerr converts between berth's error kinds (package
// errdefs) and Temporal's failures, in both directions and in this one
// place. It lives beside errdefs rather than in it because it needs the
// Temporal SDK, which errdefs must not link: providers and the
// in-sandbox daemon use errdefs and know nothing of Temporal.
//
// Into Temporal: To at the activity boundary, Failure at a workflow's or
// an Update's. Out of Temporal: KindOf and OneLine for a client reading
// what the Temporal client returned, From for workflow code reading what
// an activity failed with, Classify for a client handing an error on to
// a program that tests it with errdefs.KindOf.
package temporalerr

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/errdefs"
)

// To converts an activity's error into a Temporal application error
// whose type is the error's kind. The message is the error's own and the
// cause is left out: it would repeat the message in every rendering of
// the failure chain, and the type says all a workflow tests. Only a kind
// a retry may cure is retryable. Cancellation and an error already
// converted pass through.
func To(err error) error {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &appErr):
		return err // already converted
	}
	kind := errdefs.KindOf(err)
	if kind.Retryable() {
		return temporal.NewApplicationError(err.Error(), string(kind))
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), string(kind), nil)
}

// From turns an activity's error back into an errdefs error of its
// kind, with the application error's message, so that workflow code
// tests it with errors.Is(err, errdefs.ErrX) too. An error that is not
// an application error of a known kind other than Internal is returned
// as it is.
func From(err error) error {
	appErr, kind, ok := raised(err)
	if !ok || kind == errdefs.Internal {
		return err
	}
	return errdefs.Errorf(kind, "%s", appErr.Message())
}

// Failure turns an error of workflow code into the error a workflow or
// an Update fails with: an application error whose type is the error's
// kind (or that of the application error it wraps, raised by an activity
// or a workflow this one waited for), so that callers in any language
// see what went wrong. Only a kind a retry may cure is retryable.
// Details, if any, ride along. Cancellation and continue-as-new pass
// through, as Temporal needs them.
func Failure(err error, details ...any) error {
	switch {
	case err == nil:
		return nil
	case temporal.IsCanceledError(err), workflow.IsContinueAsNewError(err):
		return err
	}
	kind := errdefs.KindOf(err)
	if kind == errdefs.Internal {
		_, kind, _ = raised(err)
	}
	if kind == errdefs.Internal {
		return temporal.NewApplicationError(err.Error(), string(kind), details...)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), string(kind), nil, details...)
}

// raised is the one place where a Temporal application error's type
// becomes a kind. It finds the outermost application error in err's
// chain whose type is one of berth's kinds (the outermost says most,
// with the context a workflow added), and ok; of a chain without one,
// the innermost application error, Internal and not ok; nil if there
// is none.
func raised(err error) (appErr *temporal.ApplicationError, kind errdefs.Kind, ok bool) {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if a, isApp := e.(*temporal.ApplicationError); isApp {
			if k := errdefs.Kind(a.Type()); k.Known() {
				return a, k, true
			}
			appErr = a
		}
	}
	return appErr, errdefs.Internal, false
}

// KindOf says what kind of failure err is, for a client of berth's
// workflows: err is what the Temporal client returned (a workflow's
// result, an Update's, a Query's, a start's). It is the type of the
// first application error in the chain that berth raised; Canceled,
// Terminated or Timeout when Temporal ended the workflow; NotFound and
// AlreadyExists for the server's own answers; errdefs.KindOf's answer
// for any other error.
func KindOf(err error) errdefs.Kind {
	k, _ := describe(err)
	return k
}

// Classify gives err the kind KindOf reads in it, keeping its message
// and its chain, so that errdefs.KindOf, which knows nothing of
// Temporal, reads the same: berth's client returns its errors through
// it. A context's own error is left as it is: its caller knows it.
func Classify(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return errdefs.Wrap(err, KindOf(err))
}

// OneLine renders err, as a Temporal client got it back, in one line:
// "KIND: reason", the kind as KindOf says and the reason said once,
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
	appErr, kind, ok := raised(err)
	if ok {
		return kind, appErr.Message()
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
	case appErr != nil:
		return errdefs.Internal, appErr.Message()
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
