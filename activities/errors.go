package activities

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/provider"
)

// ErrorType names the Temporal application error type of a provider
// error kind, the form in which workflows see it.
func ErrorType(k provider.Kind) string { return string(k) }

// retryable lists the kinds a retry may cure: a provider that was busy or
// briefly unreachable. Everything else will fail the same way again.
var retryable = map[provider.Kind]bool{
	provider.KindInternal: true,
}

// returned is the activity boundary: every activity returns through it,
// and it is the one place where provider errors become Temporal errors.
// Code behind it returns plain errors wrapping provider sentinels.
func returned[T any](v T, err error) (T, error) { return v, toTemporal(err) }

// toTemporal converts a provider error into a Temporal application error
// whose type is the error's kind. The message is the error's own and the
// cause is left out: it would repeat the message in every rendering of
// the failure chain, and the type says all a workflow tests.
func toTemporal(err error) error {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &appErr):
		return err // already converted
	}
	kind := provider.KindOf(err)
	if retryable[kind] {
		return temporal.NewApplicationError(err.Error(), ErrorType(kind))
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrorType(kind), nil)
}

// ToTemporal is the activity boundary's conversion, for the activities
// of other packages (session/calls): errors are converted here alone.
func ToTemporal(err error) error { return toTemporal(err) }

// FromTemporal turns an activity error back into a provider error, so
// that workflow code tests it with errors.Is(err, provider.ErrX) too.
func FromTemporal(err error) error {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return err
	}
	kind := provider.Kind(appErr.Type())
	if kind == provider.KindInternal || kind == "" {
		return err
	}
	return provider.Errorf(kind, "%s", appErr.Message())
}
