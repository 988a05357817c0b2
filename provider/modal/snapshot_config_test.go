package modal_test

import (
	"errors"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/modal"
)

// TestSnapshotSettingsRefused: a snapshot timeout or TTL out of bounds
// (or a TTL Modal cannot take, not whole seconds) is refused when the
// API is made, not at the first hibernation.
func TestSnapshotSettingsRefused(t *testing.T) {
	for name, cfg := range map[string]modal.Config{
		"timeout too long":  {SnapshotTimeout: modal.MaxSnapshotTimeout + time.Second},
		"timeout negative":  {SnapshotTimeout: -time.Second},
		"timeout too short": {SnapshotTimeout: time.Millisecond},
		"ttl fractional":    {SnapshotTTL: 1500 * time.Millisecond},
		"ttl negative":      {SnapshotTTL: -time.Hour},
		"ttl too long":      {SnapshotTTL: modal.MaxSnapshotTTL + time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			cfg.TokenID, cfg.TokenSecret = testTokenID, testTokenSecret
			if _, err := modal.New(cfg); !errors.Is(err, errdefs.ErrBadInput) {
				t.Errorf("New: %v, want ErrBadInput", err)
			}
		})
	}
}
