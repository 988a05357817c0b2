// Package errdefs is berth's vocabulary of errors: every condition berth
// reports, as a sentinel error to wrap and test with errors.Is, and as a
// Kind, the stable string that names it across process boundaries (the
// in-sandbox daemon's protocol, Temporal application errors, a client's
// answer). It imports only the standard library, so that every layer of
// berth, and any program built on berth's client, can use it:
//
//	if errdefs.KindOf(err) == errdefs.NotFound { ... }
//
// Errors that come back through Temporal (an activity's, a workflow's,
// an Update's, the server's own) are classified by package
// errdefs/temporalerr, which converts between Kinds and Temporal's
// application errors; berth's client returns errors that KindOf reads
// directly.
//
// # Wrapping
//
// Wrap a sentinel with fmt.Errorf("...: %w", errdefs.ErrX) so the message
// says what happened and errors.Is says which condition it was; Errorf
// makes an error of a Kind with a message of its own, for rebuilding an
// error received from another process.
package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
)

// The conditions every part of berth reports the same way.
var (
	// ErrNotFound: no sandbox (workflow, session, snapshot) has this id.
	ErrNotFound = errors.New("sandbox not found")
	// ErrSandboxLost: the sandbox is known but its processes are gone.
	ErrSandboxLost = errors.New("sandbox lost")
	// ErrSandboxPaused: the sandbox is paused and must be resumed first.
	ErrSandboxPaused = errors.New("sandbox paused")
	// ErrBadInput: the request is malformed or not allowed (a path that
	// leaves the workspace, an invalid id). Retrying it cannot help.
	ErrBadInput = errors.New("bad input")
	// ErrCommandNotFound: the program to run does not exist in the
	// sandbox. It is also bad input.
	ErrCommandNotFound = errors.New("command not found")
	// ErrTimeout: a command (or an operation) ran past its timeout and
	// was ended.
	ErrTimeout = errors.New("timed out")
	// ErrOutOfMemory: the sandbox hit its memory limit.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrUnsupported: the provider cannot do this.
	ErrUnsupported = errors.New("unsupported")
	// ErrAlreadyExists: something with this id exists already, and is
	// not what was asked for.
	ErrAlreadyExists = errors.New("already exists")
	// ErrCanceled: the operation was cancelled by its caller. Temporal's
	// own cancellation (and context.Canceled) is read as this kind by
	// package temporalerr.
	ErrCanceled = errors.New("canceled")
	// ErrTerminated: the workflow was ended by an operator.
	ErrTerminated = errors.New("terminated")

	// The model's conditions, as the coding agent's model activity
	// reports them.

	// ErrModelUnavailable: rate limited (429), a server error (5xx), the
	// connection lost or timed out. Retried, after the server's
	// Retry-After when it gave one.
	ErrModelUnavailable = errors.New("model unavailable")
	// ErrNoModel: no model configured, or the server does not serve it.
	ErrNoModel = errors.New("no model")
	// ErrModelAuth: the server refused the API key (401, 403).
	ErrModelAuth = errors.New("model refused the key")
	// ErrModelRejected: the server refused the request as malformed
	// (400, other 4xx), a context too long say. Retrying it cannot help.
	ErrModelRejected = errors.New("model rejected the request")
	// ErrBadModelAnswer: the answer could not be used (a tool call
	// without a name, nothing at all).
	ErrBadModelAnswer = errors.New("bad model answer")
	// ErrBadConversation: a conversation segment is missing, or its
	// bytes are not those its hash names.
	ErrBadConversation = errors.New("bad conversation")
	// ErrAnswerTooLarge: the answer passed one of the model activity's
	// bounds (its text, a tool call's arguments, the number of calls);
	// the activity stopped reading it there. Asking again would most
	// likely get the same.
	ErrAnswerTooLarge = errors.New("answer too large")

	// A hosted provider's conditions (E2B, Daytona...), as its package
	// reports them.

	// ErrProviderUnavailable: the provider's service is rate limiting
	// (429), failing (5xx) or out of reach. Retried, after the service's
	// Retry-After when it gave one.
	ErrProviderUnavailable = errors.New("provider unavailable")
	// ErrProviderAuth: the service refused the provider's key (401,
	// 403), or the worker has none.
	ErrProviderAuth = errors.New("provider refused the key")
	// ErrQuota: the account's limit on the service (sandboxes at once,
	// hours) is reached. Retrying cannot help until something ends.
	ErrQuota = errors.New("provider quota reached")

	// ErrStoreUnavailable: the blob store holding snapshots and
	// checkpoints did not answer (refused, failed or hung) for as long
	// as the worker retries it (snapshot.WithRetry). Not retried again:
	// the bound is the retry.
	ErrStoreUnavailable = errors.New("blob store unavailable")
)

// A file that does not exist in the workspace is reported with an error
// wrapping fs.ErrNotExist, as the standard library does: its kind is
// FileNotFound.

// Kind names an error condition as a stable string. These constants are
// berth's error kinds, all of them: the Temporal application errors that
// berth's activities, workflows and Updates fail with carry one as their
// type, and histories written before hold the same strings, so none may
// change.
type Kind string

// The kinds, one per sentinel error.
const (
	NotFound        Kind = "NotFound"
	SandboxLost     Kind = "SandboxLost"
	SandboxPaused   Kind = "SandboxPaused"
	BadInput        Kind = "BadInput"
	CommandNotFound Kind = "CommandNotFound"
	Timeout         Kind = "Timeout"
	OutOfMemory     Kind = "OutOfMemory"
	Unsupported     Kind = "Unsupported"
	FileNotFound    Kind = "FileNotFound"
	AlreadyExists   Kind = "AlreadyExists"
	Canceled        Kind = "Canceled"
	Terminated      Kind = "Terminated"

	ModelUnavailable Kind = "ModelUnavailable"
	NoModel          Kind = "NoModel"
	ModelAuth        Kind = "ModelAuth"
	ModelRejected    Kind = "ModelRejected"
	BadModelAnswer   Kind = "BadModelAnswer"
	BadConversation  Kind = "BadConversation"
	AnswerTooLarge   Kind = "AnswerTooLarge"

	ProviderUnavailable Kind = "ProviderUnavailable"
	ProviderAuth        Kind = "ProviderAuth"
	Quota               Kind = "Quota"

	StoreUnavailable Kind = "StoreUnavailable"

	// Internal is anything else: the only kind a retry may cure.
	Internal Kind = "Internal"
)

// kinds is ordered most specific first: a command that is not found is
// also bad input, and reports as the former.
var kinds = []struct {
	kind Kind
	err  error
}{
	{CommandNotFound, ErrCommandNotFound},
	{NotFound, ErrNotFound},
	{SandboxLost, ErrSandboxLost},
	{SandboxPaused, ErrSandboxPaused},
	{BadInput, ErrBadInput},
	{Timeout, ErrTimeout},
	{OutOfMemory, ErrOutOfMemory},
	{Unsupported, ErrUnsupported},
	{FileNotFound, fs.ErrNotExist},
	{AlreadyExists, ErrAlreadyExists},
	{Canceled, ErrCanceled},
	{Terminated, ErrTerminated},
	{ModelUnavailable, ErrModelUnavailable},
	{NoModel, ErrNoModel},
	{ModelAuth, ErrModelAuth},
	{ModelRejected, ErrModelRejected},
	{BadModelAnswer, ErrBadModelAnswer},
	{BadConversation, ErrBadConversation},
	{AnswerTooLarge, ErrAnswerTooLarge},
	{ProviderUnavailable, ErrProviderUnavailable},
	{ProviderAuth, ErrProviderAuth},
	{Quota, ErrQuota},
	{StoreUnavailable, ErrStoreUnavailable},
}

// Kinds lists every kind but Internal.
func Kinds() []Kind {
	out := make([]Kind, len(kinds))
	for i, k := range kinds {
		out[i] = k.kind
	}
	return out
}

// KindOf names the condition err wraps, or Internal.
func KindOf(err error) Kind {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.kind
		}
	}
	return Internal
}

// Known reports whether k is one of berth's kinds: a Temporal error
// whose type is not was not raised by berth.
func (k Kind) Known() bool {
	if k == Internal {
		return true
	}
	for _, kk := range kinds {
		if kk.kind == k {
			return true
		}
	}
	return false
}

// Retryable reports whether a retry may cure an error of kind k: of
// berth's own kinds only Internal, of the model's ModelUnavailable, and
// of a hosted provider's ProviderUnavailable. Everything else will fail
// the same way again.
func (k Kind) Retryable() bool {
	return k == Internal || k == ModelUnavailable || k == ProviderUnavailable
}

// Errorf makes an error of the given kind with a formatted message: the
// inverse of KindOf, for rebuilding errors received from another
// process. Of Internal, an empty kind or one berth does not know, it
// makes a plain error.
func Errorf(kind Kind, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if kind == CommandNotFound {
		return &kindError{msg: msg, errs: []error{ErrCommandNotFound, ErrBadInput}}
	}
	for _, k := range kinds {
		if k.kind == kind {
			return &kindError{msg: msg, errs: []error{k.err}}
		}
	}
	return errors.New(msg)
}

// Wrap gives err the kind k, keeping its message and its chain:
// errors.Is sees the kind's sentinel, and errors.Unwrap and errors.As
// everything err wraps. Internal (or an unknown kind) leaves err as it
// is.
func Wrap(err error, kind Kind) error {
	if err == nil || kind == KindOf(err) || kind == Internal || !kind.Known() {
		return err
	}
	return &wrapped{err: err, kind: Errorf(kind, "")}
}

// wrapped is an error given a kind: its own chain stays single, so that
// code walking it with errors.Unwrap still finds what it wraps.
type wrapped struct {
	err  error
	kind error // an Errorf of the kind: what errors.Is matches
}

func (e *wrapped) Error() string        { return e.err.Error() }
func (e *wrapped) Unwrap() error        { return e.err }
func (e *wrapped) Is(target error) bool { return errors.Is(e.kind, target) }

// kindError carries its message verbatim and matches its sentinels.
type kindError struct {
	msg  string
	errs []error
}

func (e *kindError) Error() string   { return e.msg }
func (e *kindError) Unwrap() []error { return e.errs }
