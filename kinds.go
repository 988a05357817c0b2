package berth

import (
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
)

// Kind names why an operation failed, or why a command did not run to
// its own end, as a stable string (package errdefs owns them all).
type Kind = errdefs.Kind

// The kinds a caller of the SDK tests for; errdefs lists the rest.
const (
	NotFound        = errdefs.NotFound
	AlreadyExists   = errdefs.AlreadyExists
	BadInput        = errdefs.BadInput
	FileNotFound    = errdefs.FileNotFound
	CommandNotFound = errdefs.CommandNotFound
	Timeout         = errdefs.Timeout
	OutOfMemory     = errdefs.OutOfMemory
	SandboxLost     = errdefs.SandboxLost
	Unsupported     = errdefs.Unsupported
	Canceled        = errdefs.Canceled
	Terminated      = errdefs.Terminated
	// StoreUnavailable: the blob store of snapshots and checkpoints did
	// not answer within the worker's retry bound; the sandbox and its
	// previous checkpoint are as they were.
	StoreUnavailable = errdefs.StoreUnavailable
	Internal         = errdefs.Internal
)

// KindOf says what kind of failure err is, whatever Temporal wrapped it
// in: an Update's failure, a workflow's, the server's own answers
// (NotFound, AlreadyExists), or an error of the SDK's.
//
//	if berth.KindOf(err) == berth.NotFound { ... }
func KindOf(err error) Kind {
	if err == nil {
		return ""
	}
	return temporalerr.KindOf(err)
}

// OneLine renders err in one line, "Kind: reason", without the chain of
// workflow and activity errors Temporal wraps around it, as berth's
// command prints errors.
func OneLine(err error) string { return temporalerr.OneLine(err) }
