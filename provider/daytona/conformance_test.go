package daytona_test

import (
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/daytona"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// newFake starts a fake for one test, its spec violations a failure.
func newFake(t *testing.T, opts daytonafake.Options) *daytonafake.Server {
	t.Helper()
	opts.Farm, opts.APIKey = farm, testKey
	f, err := daytonafake.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("Daytona API violations:\n%s", strings.Join(v, "\n"))
		}
	})
	return f
}

// settings are the provider's settings against f.
func settings(t *testing.T, f *daytonafake.Server) provider.Config {
	t.Helper()
	t.Setenv(daytona.DefaultAPIKeyEnv, testKey)
	t.Setenv(daytona.DefaultSecretEnv, "the daytona tests' secret")
	return provider.Config{"api-url": f.APIURL(), "daemon": daemon}
}

func openProvider(t *testing.T, pc provider.Config) provider.Provider {
	t.Helper()
	p, err := provider.Open(t.Context(), daytona.Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConformance runs berth's provider suite over the registered
// daytona provider (package remote over this package's API) against
// the fake: berth-sandboxd uploaded through the toolbox, started in a
// session, and reached through the sandbox's preview URL. Daytona has
// no pause of its own, so the suite's pause is the daemon's.
func TestConformance(t *testing.T) {
	f := newFake(t, daytonafake.Options{Quota: daytonafake.Quota{CPU: 1000, MemoryGiB: 1000, DiskGiB: 10000}, StartDelay: 10 * time.Millisecond})
	pc := settings(t, f)
	h := remotetest.Harness(farm, func(t *testing.T) provider.Provider { return openProvider(t, pc) })
	// Its machines are remotefake's, reached as provider/remote's are.
	h.MachinesHeldBy = remotetest.MachinesSuite
	providertest.Run(t, h)
}
