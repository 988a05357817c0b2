package berth

import (
	"testing"
	"time"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// TestConstantsMatchTheWire: the SDK spells its defaults and states
// out, so that go doc shows their values; they are the workers' own.
func TestConstantsMatchTheWire(t *testing.T) {
	for _, c := range []struct {
		name      string
		sdk, wire any
	}{
		{"DefaultProvider", DefaultProvider, sandbox.DefaultProvider},
		{"DefaultQueue", DefaultQueue, sandbox.DefaultQueue},
		{"DefaultIdleTimeout", DefaultIdleTimeout, sandbox.DefaultIdleTimeout},
		{"DefaultHibernateAfter", DefaultHibernateAfter, sandbox.DefaultHibernateAfter},
		{"DefaultLifetime", DefaultLifetime, provider.DefaultLifetime},
		{"DefaultExecTimeout", DefaultExecTimeout, sandbox.DefaultExecTimeout},
		{"DefaultHostTimeout", DefaultHostTimeout, sandbox.DefaultHostTimeout},
		{"MinHostTimeout", MinHostTimeout, sandbox.MinHostTimeout},
		{"MaxHostTimeout", MaxHostTimeout, sandbox.MaxHostTimeout},
		{"Never", Never, sandbox.NoIdleTimeout},
		{"LiveEvery", LiveEvery, time.Duration(activities.LiveEvery)},
		{"StateRunning", string(StateRunning), string(sandbox.StateRunning)},
		{"StatePaused", string(StatePaused), string(sandbox.StatePaused)},
		{"StateHibernated", string(StateHibernated), string(sandbox.StateHibernated)},
		{"StateLost", string(StateLost), string(sandbox.StateLost)},
		{"StateStopped", string(StateStopped), string(sandbox.StateStopped)},
	} {
		if c.sdk != c.wire {
			t.Errorf("%s = %v, the workers' %v", c.name, c.sdk, c.wire)
		}
	}
}
