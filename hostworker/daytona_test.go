package hostworker_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// daytonaWorld is a remoteWorld serving daytona, over a fake Daytona
// whose API is behind the gate (the toolbox and the previews, at the
// URLs the API answers, are not).
type daytonaWorld struct {
	*remoteWorld
	fake *daytonafake.Server
}

// newDaytonaWorld starts the server, the fake and the gate for the test;
// the workers' key is key, their daemons' secret secret.
func newDaytonaWorld(t *testing.T, key, secret string) *daytonaWorld {
	t.Helper()
	w := &daytonaWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = daytonafake.New(t.Context(), daytonafake.Options{Farm: w.farm, APIKey: key, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake removes its sandboxes' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests or answers against Daytona's spec:\n%s", strings.Join(v, "\n"))
		}
	})
	w.gate = newGate(t, w.fake.URL())
	w.provider = "daytona"
	w.settings = provider.Config{"api-url": w.gate.URL() + "/api"}
	w.env = []string{"DAYTONA_API_KEY=" + key, "BERTH_DAYTONA_SECRET=" + secret}
	w.sandboxes = w.fake.Sandboxes
	w.machineOf = func(id string) (*remotefake.Machine, error) {
		if m := w.fake.Machine(id); m != nil {
			return m, nil
		}
		return nil, fmt.Errorf("daytona sandbox %s has no machine", id)
	}
	w.creates = func() int { return w.fake.Requests("POST /sandbox") }
	// The Create activity asks the API for the daemon's preview URL once
	// the daemon is started, to reach it.
	w.holdCreate = w.holdAtGate(func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/sandbox/") && strings.HasSuffix(r.URL.Path, "/preview-url")
	})
	w.midCreate = "the request for the daemon's preview URL"
	return w
}
