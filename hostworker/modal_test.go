package hostworker_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
)

// modalWorld is a remoteWorld serving modal, over a fake Modal. Modal's
// API is gRPC, which the gate does not carry: a create is held by a
// fault of the fake's instead.
type modalWorld struct {
	*remoteWorld
	fake *modalfake.Server
}

// newModalWorld starts the server and the fake for the test; the
// workers' token is id and secret, their daemons' secret daemonSecret.
func newModalWorld(t *testing.T, id, secret, daemonSecret string) *modalWorld {
	t.Helper()
	w := &modalWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = modalfake.New(t.Context(), modalfake.Options{Farm: w.farm, TokenID: id, TokenSecret: secret, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake ends its sandboxes' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("calls against Modal's protocol:\n%s", strings.Join(v, "\n"))
		}
	})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, w.fake.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	w.provider = "modal"
	w.settings = provider.Config{"server-url": w.fake.URL(), "tunnel-ca-file": ca}
	w.env = []string{"MODAL_TOKEN_ID=" + id, "MODAL_TOKEN_SECRET=" + secret, "BERTH_MODAL_SECRET=" + daemonSecret,
		"MODAL_CONFIG_PATH=" + filepath.Join(dir, "no-modal.toml")}
	w.sandboxes = w.fake.IDs
	w.machineOf = w.farm.Machine
	w.creates = func() int { return w.fake.Requests("SandboxCreateV2") }
	// Modal's API is gRPC, which the gate does not carry: the fake holds
	// the wait for the exec that starts the daemon (the first wait is
	// the upload's).
	w.holdCreate = func(t *testing.T) (<-chan struct{}, func()) {
		hold, held := make(chan struct{}), make(chan struct{}, 16)
		var once sync.Once
		w.fake.Inject(modalfake.Fault{Method: "TaskExecWait", Skip: 1, Hold: hold, Held: held})
		return held, func() { once.Do(func() { close(hold) }) }
	}
	w.midCreate = "the wait for the daemon's start"
	return w
}
