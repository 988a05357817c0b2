package daytona

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestOpen: the settings reach the API and package remote; the key is
// required, read from the variable or file named, and never the
// daemons' secret itself; commands run as Daytona's user in its home.
func TestOpen(t *testing.T) {
	t.Setenv(DefaultSecretEnv, "")
	t.Setenv(DefaultAPIKeyEnv, "")
	if _, _, err := Open(t.Context(), provider.Config{}); !errors.Is(err, errdefs.ErrProviderAuth) || !strings.Contains(err.Error(), "$DAYTONA_API_KEY") {
		t.Fatalf("no key: %v, want an auth error naming $DAYTONA_API_KEY", err)
	}
	t.Setenv(DefaultAPIKeyEnv, "dtn_key_one")
	api, rc, err := Open(t.Context(), provider.Config{
		"state-dir": t.TempDir(), "api-url": "http://127.0.0.1:1/api", "snapshot": "base",
		"auto-stop": "20m", "port": "4000", "target": "eu",
	})
	if err != nil {
		t.Fatal(err)
	}
	if api.cfg.APIURL != "http://127.0.0.1:1/api" || api.cfg.Snapshot != "base" || api.cfg.AutoStop.Minutes() != 20 || api.cfg.Target != "eu" {
		t.Errorf("API config: %+v", api.cfg)
	}
	if rc.Port != 4000 || rc.User != DefaultUser {
		t.Errorf("remote config: %+v", rc)
	}
	if len(rc.Secret) == 0 || bytes.Contains(rc.Secret, []byte("dtn_key_one")) {
		t.Errorf("secret %x: want one derived from the key, not the key", rc.Secret)
	}
	_, rc2, _ := Open(t.Context(), provider.Config{})
	if !bytes.Equal(rc.Secret, rc2.Secret) {
		t.Error("two workers with one key derive two secrets")
	}
	if _, _, err := Open(t.Context(), provider.Config{"bogus": "1"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("unknown setting: %v", err)
	}
	if _, _, err := Open(t.Context(), provider.Config{"api-url": "ftp://x"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("bad api-url: %v", err)
	}
	if _, _, err := Open(t.Context(), provider.Config{"auto-stop": "soon"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("bad auto-stop: %v", err)
	}
}
