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

// toTemporal converts a provider error into a Temporal application error
// whose type is the error's kind.
func toTemporal(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	kind := provider.KindOf(err)
	if retryable[kind] {
		return temporal.NewApplicationErrorWithCause(err.Error(), ErrorType(kind), err)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrorType(kind), err)
}

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
