package modal_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// newFake starts a fake for one test, its protocol violations a failure.
func newFake(t *testing.T, opts modalfake.Options) *modalfake.Server {
	t.Helper()
	opts.Farm, opts.TokenID, opts.TokenSecret = farm, testTokenID, testTokenSecret
	f, err := modalfake.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("Modal protocol violations:\n%s", strings.Join(v, "\n"))
		}
	})
	return f
}

// settings are the provider's settings against f: its server URL, and
// its CA for the tunnels.
func settings(t *testing.T, f *modalfake.Server) provider.Config {
	t.Helper()
	t.Setenv(modal.DefaultTokenIDEnv, testTokenID)
	t.Setenv(modal.DefaultTokenSecretEnv, testTokenSecret)
	t.Setenv(modal.DefaultSecretEnv, "the modal tests' secret")
	// A copy of the CA, that outlives the fake for a test that closes it.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, f.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return provider.Config{"server-url": f.URL(), "tunnel-ca-file": ca, "daemon": daemon}
}

func openProvider(t *testing.T, pc provider.Config) provider.Provider {
	t.Helper()
	p, err := provider.Open(t.Context(), modal.Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConformance runs berth's provider suite over the registered modal
// provider (package remote over this package's API) against the fake:
// berth-sandboxd uploaded through an exec's input, started by an exec,
// and reached through the sandbox's encrypted tunnel. Modal's
// filesystem snapshots keep no memory, so the suite's pause is the
// daemon's.
func TestConformance(t *testing.T) {
	f := newFake(t, modalfake.Options{})
	pc := settings(t, f)
	h := remotetest.Harness(farm, func(t *testing.T) provider.Provider { return openProvider(t, pc) })
	// Its machines are remotefake's, reached as provider/remote's are.
	h.MachinesHeldBy = remotetest.MachinesSuite
	providertest.Run(t, h)
}
