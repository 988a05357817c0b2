package temporalerr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/errdefs"
)

// wire sends err across Temporal as a failure and back, as a workflow or
// a client receives it.
func wire(err error) error {
	fc := temporal.GetDefaultFailureConverter()
	return fc.FailureToError(fc.ErrorToFailure(err))
}

func TestRoundTrip(t *testing.T) {
	for _, k := range append(errdefs.Kinds(), errdefs.Internal) {
		t.Run(string(k), func(t *testing.T) {
			sent := fmt.Errorf("exec: %w", errdefs.Errorf(k, "sandbox %s said no", "sbx-1"))
			got := wire(To(sent))
			var appErr *temporal.ApplicationError
			if !errors.As(got, &appErr) || appErr.Type() != string(k) {
				t.Fatalf("To: %#v, want an application error of type %s", got, k)
			}
			if appErr.NonRetryable() == k.Retryable() {
				t.Errorf("non-retryable %v for kind %s", appErr.NonRetryable(), k)
			}
			if KindOf(got) != k {
				t.Errorf("KindOf = %s, want %s", KindOf(got), k)
			}
			back := From(got)
			if errdefs.KindOf(back) != k {
				t.Errorf("errdefs.KindOf(From) = %s, want %s", errdefs.KindOf(back), k)
			}
			if k != errdefs.Internal && back.Error() != "exec: sandbox sbx-1 said no" {
				t.Errorf("From's message %q", back)
			}
			// Wrapped by the SDK (an activity's error in a workflow's) or by
			// berth's code, it keeps its kind.
			wrapped := fmt.Errorf("step 2: %w", temporal.NewApplicationErrorWithCause("workflow failed", "", got))
			if KindOf(wrapped) != k {
				t.Errorf("KindOf(wrapped) = %s, want %s", KindOf(wrapped), k)
			}
			if c := Classify(wrapped); errdefs.KindOf(c) != k || c.Error() != wrapped.Error() || OneLine(c) != OneLine(wrapped) {
				t.Errorf("Classify: kind %s, %q, one line %q", errdefs.KindOf(c), c, OneLine(c))
			}
			f := wire(Failure(sent))
			if KindOf(f) != k || errdefs.KindOf(From(f)) != k {
				t.Errorf("Failure: kind %s", KindOf(f))
			}
		})
	}
}

func TestUnknownTypeIsInternal(t *testing.T) {
	got := wire(temporal.NewApplicationError("the SDK's own", "SomethingElse"))
	if k := KindOf(got); k != errdefs.Internal {
		t.Errorf("KindOf = %s, want Internal", k)
	}
	if From(got) != got {
		t.Errorf("From changed an unknown type: %v", From(got))
	}
	if f := Failure(got); KindOf(f) != errdefs.Internal {
		t.Errorf("Failure typed it %s", KindOf(f))
	}
	if line := OneLine(got); line != "Internal: the SDK's own" {
		t.Errorf("OneLine = %q", line)
	}
}

func TestTemporalsOwn(t *testing.T) {
	terminated := wire(temporal.GetDefaultFailureConverter().FailureToError(&failurepb.Failure{
		Message: "terminated", FailureInfo: &failurepb.Failure_TerminatedFailureInfo{TerminatedFailureInfo: &failurepb.TerminatedFailureInfo{}}}))
	for _, tc := range []struct {
		name string
		err  error
		kind errdefs.Kind
		line string
	}{
		{"canceled", temporal.NewCanceledError(), errdefs.Canceled, "Canceled: canceled"},
		{"context canceled", fmt.Errorf("wait: %w", context.Canceled), errdefs.Canceled, "Canceled: canceled"},
		{"terminated", terminated, errdefs.Terminated, "Terminated: terminated"},
		{"timeout", temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil), errdefs.Timeout, "Timeout: timed out (StartToClose)"},
		{"no workflow", serviceerror.NewNotFound("workflow not found for ID: x"), errdefs.NotFound, "NotFound: workflow not found for ID: x"},
		{"started", serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", ""), errdefs.AlreadyExists, "AlreadyExists: already started"},
		{"plain", errors.New("dial tcp: refused"), errdefs.Internal, "Internal: dial tcp: refused"},
		{"a sentinel", fmt.Errorf("session x: %w", errdefs.ErrNotFound), errdefs.NotFound, "NotFound: session x: sandbox not found"},
		{"many lines", temporal.NewNonRetryableApplicationError("a\n  b", "BadInput", nil), errdefs.BadInput, "BadInput: a b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k := KindOf(tc.err); k != tc.kind {
				t.Errorf("KindOf = %s, want %s", k, tc.kind)
			}
			if line := OneLine(tc.err); line != tc.line {
				t.Errorf("OneLine = %q, want %q", line, tc.line)
			}
			if k := errdefs.KindOf(Classify(tc.err)); k != tc.kind && !errors.Is(tc.err, context.Canceled) {
				t.Errorf("errdefs.KindOf(Classify) = %s, want %s", k, tc.kind)
			}
		})
	}
}

func TestPassThrough(t *testing.T) {
	for _, err := range []error{nil, context.Canceled, fmt.Errorf("x: %w", context.DeadlineExceeded)} {
		if got := To(err); got != err {
			t.Errorf("To(%v) = %v, want it as it is", err, got)
		}
	}
	if c := fmt.Errorf("x: %w", context.Canceled); Classify(c) != c {
		t.Error("Classify wrapped a context's error")
	}
	app := temporal.NewApplicationError("typed", "BadInput")
	if To(app) != app {
		t.Error("To converted an application error again")
	}
	if c := temporal.NewCanceledError(); Failure(c) != c {
		t.Error("Failure converted a cancellation")
	}
	var appErr *temporal.ApplicationError
	if f := Failure(errors.New("lost"), "details"); !errors.As(f, &appErr) || !appErr.HasDetails() {
		t.Errorf("Failure dropped its details: %v", f)
	}
}
