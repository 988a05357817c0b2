// Package daemonpause pauses a self-hosted sandbox through its daemon,
// which stops every other process of the sandbox and is never stopped
// itself: a paused sandbox still ends at its lifetime with no host
// about, which a cgroup freezer or runsc pause, freezing the daemon
// with the rest, would prevent. A marker file on the host says that
// the sandbox is paused, so that Info and every operation know it
// without asking the daemon.
package daemonpause

import (
	"context"
	"errors"
	"io/fs"
	"os"

	"github.com/berth-dev/berth/sandboxd"
)

// Paused reports whether the marker at path says the sandbox is paused.
func Paused(marker string) bool {
	_, err := os.Lstat(marker)
	return err == nil
}

// Set pauses (pause true) or resumes the sandbox whose daemon c reaches,
// with its marker at path; check turns a failure to reach the daemon
// into the provider's error. The caller holds the sandbox's lock.
func Set(ctx context.Context, c *sandboxd.Client, marker string, pause bool, check func(error) error) error {
	if pause {
		// The marker goes first: from here on operations fail with
		// ErrPaused rather than start what the pause would stop.
		if err := os.WriteFile(marker, nil, 0o600); err != nil {
			return err
		}
		if err := c.Pause(ctx); err != nil {
			_ = os.Remove(marker)
			return check(err)
		}
		return nil
	}
	if err := c.Resume(ctx); err != nil {
		return check(err)
	}
	if err := os.Remove(marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
