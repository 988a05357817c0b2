package gke_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/gke"
	"github.com/berth-dev/berth/provider/gke/gkefake"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// testTemplate is the template (and warm pool) the tests' sandboxes
// are made from.
const testTemplate = "berth-runtime"

// newFake starts a fake cluster for one test, with the template, its
// violations a failure.
func newFake(t *testing.T, opts gkefake.Options) *gkefake.Server {
	t.Helper()
	opts.Farm, opts.Token = farm, testToken
	f, err := gkefake.New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("Kubernetes API violations:\n%s", strings.Join(v, "\n"))
		}
	})
	if err := f.AddTemplate("default", testTemplate); err != nil {
		t.Fatal(err)
	}
	return f
}

// settings are the provider's settings against f: a kubeconfig the
// fake wrote, the template and the router.
func settings(t *testing.T, f *gkefake.Server) provider.Config {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := f.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(gke.DefaultSecretEnv, "the gke tests' secret")
	return provider.Config{"kubeconfig": kc, "template": testTemplate, "router-url": f.RouterURL(), "daemon": daemon}
}

func openProvider(t *testing.T, pc provider.Config) provider.Provider {
	t.Helper()
	p, err := provider.Open(t.Context(), gke.Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConformance runs berth's provider suite over the registered gke
// provider against the fake cluster: claims the fake's controller
// fulfils, berth-sandboxd uploaded and started through the runtime, and
// reached through the port forward to the sandbox's pod. The cluster
// has no pause of its own, so the suite's pause is the daemon's.
func TestConformance(t *testing.T) {
	f := newFake(t, gkefake.Options{})
	pc := settings(t, f)
	h := remotetest.Harness(farm, func(t *testing.T) provider.Provider { return openProvider(t, pc) })
	// Its machines are remotefake's, reached as provider/remote's are.
	h.MachinesHeldBy = remotetest.MachinesSuite
	providertest.Run(t, h)
}
