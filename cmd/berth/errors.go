package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
)

// exitError ends berth with a code and nothing more to say: the command
// it ran said it already.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitBerth is berth's own failure, as docker's 125: never to be taken
// for a command's exit code.
const exitBerth = 125

// usageError is a mistake on the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

// oneLine says what went wrong in one line: for an error from the
// Temporal server or a workflow, its kind and reason (temporalerr.OneLine),
// not the chain; for berth's own, its message.
func oneLine(err error) string {
	var gone *berth.UnavailableError
	if errors.As(err, &gone) {
		return flatten(err.Error()) // says whether it may have run
	}
	// The server says Internal of a namespace it does not have: it is
	// the caller's to fix.
	var noNamespace *serviceerror.NamespaceNotFound
	if errors.As(err, &noNamespace) {
		return fmt.Sprintf("%s: namespace %q does not exist on the Temporal server (--namespace, $TEMPORAL_NAMESPACE, or the profile's)",
			errdefs.NotFound, noNamespace.Namespace)
	}
	var (
		app        *temporal.ApplicationError
		canceled   *temporal.CanceledError
		terminated *temporal.TerminatedError
		timeout    *temporal.TimeoutError
		service    serviceerror.ServiceError
	)
	if errors.As(err, &app) || errors.As(err, &canceled) || errors.As(err, &terminated) ||
		errors.As(err, &timeout) || errors.As(err, &service) {
		return temporalerr.OneLine(err)
	}
	// The client's own errors of a kind (a session not found) say it as
	// the server's do.
	if k := errdefs.KindOf(err); k != errdefs.Internal {
		return fmt.Sprintf("%s: %s", k, flatten(err.Error()))
	}
	return flatten(err.Error())
}

// flatten keeps a message on one line.
func flatten(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	return s
}
