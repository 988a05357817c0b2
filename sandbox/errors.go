package sandbox

import (
	"errors"

	"github.com/berth-dev/berth/errdefs/temporalerr"
)

// Failure turns an error of a handle (or of workflow code around one)
// into the error a workflow or an update fails with: a Temporal
// application error typed by the error's errdefs kind (temporalerr.Failure),
// so that callers in any language see what went wrong. A LostError
// carries the operations it lost as details.
func Failure(err error) error {
	var lost *LostError
	if errors.As(err, &lost) {
		return temporalerr.Failure(err, lost.Lost)
	}
	return temporalerr.Failure(err)
}
