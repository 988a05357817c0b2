package hostworker_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/gke"
	"github.com/berth-dev/berth/provider/gke/gkefake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// gkeWorld is a remoteWorld serving gke, over a fake cluster whose
// sandbox router is behind the gate (its API, and the port forward to
// the daemons, are not).
type gkeWorld struct {
	*remoteWorld
	fake *gkefake.Server
	// executes counts the runtime's /execute requests through the gate.
	executes atomic.Int32
}

// newGKEWorld starts the server, the fake and the gate for the test;
// the workers' kubeconfig holds token, their daemons' secret is secret.
func newGKEWorld(t *testing.T, token, secret string) *gkeWorld {
	t.Helper()
	w := &gkeWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = gkefake.New(t.Context(), gkefake.Options{Farm: w.farm, Token: token, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake removes its pods' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests against the Kubernetes API or the router:\n%s", strings.Join(v, "\n"))
		}
	})
	if err := w.fake.AddTemplate("default", "berth-runtime"); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := w.fake.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	w.gate = newGate(t, w.fake.RouterURL())
	w.provider = "gke"
	w.settings = provider.Config{"kubeconfig": kc, "template": "berth-runtime", "router-url": w.gate.URL()}
	w.env = []string{"BERTH_GKE_SECRET=" + secret}
	w.sandboxes = func() []string { return w.fake.Sandboxes("default") }
	w.machineOf = func(name string) (*remotefake.Machine, error) {
		if m, ok := w.fake.Machine("default", name); ok {
			return m, nil
		}
		return nil, fmt.Errorf("gke sandbox %s has no machine", name)
	}
	w.creates = func() int { return w.fake.Requests("create sandboxclaims") }
	w.holdCreate = w.holdAtGate(w.daemonStart)
	w.midCreate = "the runtime's execute that starts the daemon"
	return w
}

// daemonStart picks the runtime's second /execute of a sandbox: the one
// that starts the daemon (the first moves it into place).
func (w *gkeWorld) daemonStart(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/execute" && w.executes.Add(1) == 2
}
