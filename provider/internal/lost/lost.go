// Package lost tells a sandbox whose daemon cannot be reached because
// the sandbox is gone (killed from outside, by the out-of-memory killer
// or an operator) from one whose connection merely failed.
package lost

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-dev/berth/errdefs"
)

// Check turns err, from talking to a sandbox's daemon, into lost (a
// errdefs.ErrSandboxLost naming the sandbox) when gone reports the sandbox
// gone. Errors the daemon reported, of a kind other than internal, and
// the caller's cancellation pass through as they are. gone may take a
// moment: a daemon going down closes its connections before it is seen
// gone.
func Check(err error, lost error, gone func() bool) error {
	if err == nil || errdefs.KindOf(err) != errdefs.Internal {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if gone() {
		return fmt.Errorf("%w: %w", lost, err)
	}
	return err
}
