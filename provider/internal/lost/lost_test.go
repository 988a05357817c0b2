package lost

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/berth-dev/berth/errdefs"
)

// TestCheck: only an internal error (a failed connection) of a sandbox
// that is gone becomes lost, keeping its cause; the daemon's own errors
// and the caller's cancellation pass as they are, without asking gone.
func TestCheck(t *testing.T) {
	sbLost := fmt.Errorf("%w: sandbox sb-1", errdefs.ErrSandboxLost)
	reset := errors.New("read unix sandboxd.sock: connection reset by peer")
	for name, c := range map[string]struct {
		err      error
		gone     bool
		wantLost bool
		asks     bool // whether gone is asked
	}{
		"nil":                    {err: nil, gone: true},
		"the daemon's bad input": {err: fmt.Errorf("%w: path escapes", errdefs.ErrBadInput), gone: true},
		"canceled":               {err: context.Canceled, gone: true},
		"deadline":               {err: fmt.Errorf("exec: %w", context.DeadlineExceeded), gone: true},
		"a reset, sandbox alive": {err: reset, gone: false, asks: true},
		"a reset, sandbox gone":  {err: reset, gone: true, wantLost: true, asks: true},
	} {
		t.Run(name, func(t *testing.T) {
			asked := false
			got := Check(c.err, sbLost, func() bool { asked = true; return c.gone })
			if asked != c.asks {
				t.Errorf("gone asked: %v, want %v", asked, c.asks)
			}
			switch {
			case c.wantLost:
				if !errors.Is(got, errdefs.ErrSandboxLost) || !errors.Is(got, sbLost) || !errors.Is(got, c.err) {
					t.Errorf("Check = %v, want lost wrapping %v", got, c.err)
				}
			case got != c.err:
				t.Errorf("Check = %v, want %v as it was", got, c.err)
			}
		})
	}
}
