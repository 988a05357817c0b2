package snapshot

import (
	"errors"

	"github.com/berth-dev/berth/errdefs"
)

// The conditions callers tell apart. Errors returned by this package wrap
// one of them (errors.Is) with a message saying what happened.
var (
	// ErrNotFound: no snapshot has this id.
	ErrNotFound = errors.New("snapshot not found")
	// ErrCorrupt: something read back from the bucket is not what was
	// written (a chunk whose hash does not match, a missing chunk, a
	// manifest that does not parse or describes an impossible tree).
	// Retrying does not help.
	ErrCorrupt = errors.New("snapshot corrupt")
	// ErrBadInput is errdefs.ErrBadInput: the caller's options or the
	// source's tar stream are malformed or not allowed (a path that leaves
	// the workspace, an entry type that does not travel). Being the same
	// sentinel, it reports as BadInput at the activity boundary.
	ErrBadInput = errdefs.ErrBadInput
	// ErrUnavailable is errdefs.ErrStoreUnavailable: the bucket did not
	// answer, or failed, for as long as the store retries (WithRetry).
	// Nothing was saved.
	ErrUnavailable = errdefs.ErrStoreUnavailable
)
