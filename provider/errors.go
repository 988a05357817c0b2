package provider

import (
	"errors"
	"fmt"
	"io/fs"
)

// The conditions every provider reports the same way. Wrap them with
// fmt.Errorf("...: %w", ErrX) so the message says what happened and
// errors.Is says which condition it was.
var (
	// ErrNotFound: no sandbox has this id.
	ErrNotFound = errors.New("sandbox not found")
	// ErrLost: the sandbox is known but its processes are gone.
	ErrLost = errors.New("sandbox lost")
	// ErrPaused: the sandbox is paused and must be resumed first.
	ErrPaused = errors.New("sandbox paused")
	// ErrBadInput: the request is malformed or not allowed (a path that
	// leaves the workspace, an invalid id). Retrying it cannot help.
	ErrBadInput = errors.New("bad input")
	// ErrCommandNotFound: the program to run does not exist in the
	// sandbox. It is also bad input.
	ErrCommandNotFound = errors.New("command not found")
	// ErrTimeout: a command ran past its timeout and was ended.
	ErrTimeout = errors.New("timed out")
	// ErrOutOfMemory: the sandbox hit its memory limit.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrUnsupported: the provider cannot do this.
	ErrUnsupported = errors.New("unsupported")
	// ErrAlreadyExists: something with this id exists already, and is
	// not what was asked for.
	ErrAlreadyExists = errors.New("already exists")
)

// A file that does not exist in the workspace is reported with an error
// wrapping fs.ErrNotExist, as the standard library does.

// Kind names an error condition as a stable string, for error types that
// cross process boundaries (a daemon's wire protocol, Temporal failures).
// These constants are berth's error-type strings, all of them: Temporal
// application errors raised by berth's activities and workflows carry one
// as their type.
type Kind string

// The kinds, one per sentinel error.
const (
	KindNotFound        Kind = "NotFound"
	KindLost            Kind = "SandboxLost"
	KindPaused          Kind = "SandboxPaused"
	KindBadInput        Kind = "BadInput"
	KindCommandNotFound Kind = "CommandNotFound"
	KindTimeout         Kind = "Timeout"
	KindOutOfMemory     Kind = "OutOfMemory"
	KindUnsupported     Kind = "Unsupported"
	KindFileNotFound    Kind = "FileNotFound"
	KindAlreadyExists   Kind = "AlreadyExists"
	// KindCanceled names an operation cancelled by its caller. It has no
	// sentinel: it comes from Temporal (or context.Canceled).
	KindCanceled Kind = "Canceled"
	// KindTerminated names a workflow ended by an operator. Temporal's too.
	KindTerminated Kind = "Terminated"
	// KindInternal is anything else.
	KindInternal Kind = "Internal"
)

// kinds is ordered most specific first: a command that is not found is
// also bad input, and reports as the former.
var kinds = []struct {
	kind Kind
	err  error
}{
	{KindCommandNotFound, ErrCommandNotFound},
	{KindNotFound, ErrNotFound},
	{KindLost, ErrLost},
	{KindPaused, ErrPaused},
	{KindBadInput, ErrBadInput},
	{KindTimeout, ErrTimeout},
	{KindOutOfMemory, ErrOutOfMemory},
	{KindUnsupported, ErrUnsupported},
	{KindFileNotFound, fs.ErrNotExist},
	{KindAlreadyExists, ErrAlreadyExists},
}

// KindOf names the condition err wraps, or KindInternal.
func KindOf(err error) Kind {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return KindInternal
}

// Known reports whether k is one of the kinds above: a Temporal error
// whose type is not was not raised by berth.
func (k Kind) Known() bool {
	switch k {
	case KindCanceled, KindTerminated, KindInternal:
		return true
	}
	for _, kk := range kinds {
		if kk.kind == k {
			return true
		}
	}
	return false
}

// Errorf makes an error of the given kind with a formatted message: the
// inverse of KindOf, for rebuilding errors received from another process.
func Errorf(kind Kind, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch kind {
	case KindCommandNotFound:
		return &kindError{msg: msg, errs: []error{ErrCommandNotFound, ErrBadInput}}
	case KindInternal, "":
		return errors.New(msg)
	}
	for _, k := range kinds {
		if k.kind == kind {
			return &kindError{msg: msg, errs: []error{k.err}}
		}
	}
	return errors.New(msg)
}

// kindError carries its message verbatim and matches its sentinels.
type kindError struct {
	msg  string
	errs []error
}

func (e *kindError) Error() string   { return e.msg }
func (e *kindError) Unwrap() []error { return e.errs }
