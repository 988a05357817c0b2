package main

import (
	"errors"
	"fmt"
	"strings"

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

// oneLine says what went wrong in one line: the reason at the bottom of
// a Temporal error chain, with its kind, not the chain.
func oneLine(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		// The deepest application error is the cause; the ones above it
		// only wrap it.
		for {
			var next *temporal.ApplicationError
			if !errors.As(app.Unwrap(), &next) {
				break
			}
			app = next
		}
		msg := app.Message()
		if t := app.Type(); t != "" && !strings.HasPrefix(msg, t) {
			msg = t + ": " + msg
		}
		return flatten(msg)
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return "cancelled"
	}
	return flatten(err.Error())
}

// rootCause is the error at the bottom of a chain, for messages about
// connections, where the layers above repeat it.
func rootCause(err error) error {
	var st interface{ Status() any }
	_ = st
	for {
		var se serviceerror.ServiceError
		if errors.As(err, &se) {
			return se
		}
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// flatten keeps a message on one line.
func flatten(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	return s
}
