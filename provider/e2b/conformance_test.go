package e2b_test

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// TestConformance runs berth's provider suite over the registered e2b
// provider (package remote over this package's API) against the fake:
// berth-sandboxd uploaded into each sandbox, started through envd and
// reached through E2B's port proxy.
func TestConformance(t *testing.T) {
	daemon, err := remotetest.BuildDaemon(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := e2bfake.New(t.Context(), e2bfake.Options{Farm: farm, APIKey: testKey, MaxSandboxes: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("spec violations:\n%s", strings.Join(v, "\n"))
		}
	})
	t.Setenv("E2B_API_KEY", testKey)
	t.Setenv(e2b.DefaultSecretEnv, "the e2b tests' secret")
	pc := provider.Config{"api-url": f.URL(), "sandbox-url": f.SandboxURL(), "daemon": daemon, "max-lifetime": "24h"}
	h := remotetest.Harness(farm, func(t *testing.T) provider.Provider {
		p, err := provider.Open(t.Context(), e2b.Name, pc)
		if err != nil {
			t.Fatal(err)
		}
		return p
	})
	// Its machines are remotefake's, reached as provider/remote's are.
	h.MachinesHeldBy = remotetest.MachinesSuite
	providertest.Run(t, h)
}
