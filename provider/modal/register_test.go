package modal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestOpen: the settings reach the API and package remote; the token is
// required, read from the variables or files named, and never the
// daemons' secret itself; a bad setting is a one-line BadInput that
// quotes no token.
func TestOpen(t *testing.T) {
	t.Setenv(DefaultSecretEnv, "")
	t.Setenv(DefaultTokenIDEnv, "")
	t.Setenv(DefaultTokenSecretEnv, "")
	if _, _, err := Open(t.Context(), provider.Config{}); !errors.Is(err, errdefs.ErrProviderAuth) || !strings.Contains(err.Error(), "$MODAL_TOKEN_ID") {
		t.Fatalf("no token: %v, want an auth error naming $MODAL_TOKEN_ID", err)
	}
	t.Setenv(DefaultTokenIDEnv, "ak-one")
	t.Setenv(DefaultTokenSecretEnv, "as-one-secret")
	api, rc, err := Open(t.Context(), provider.Config{
		"state-dir": t.TempDir(), "server-url": "http://127.0.0.1:1", "app": "mine", "image": "ubuntu:24.04",
		"idle-timeout": "10m", "port": "4000", "user": "agent", "environment": "dev",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	c := api.cfg
	if c.ServerURL != "http://127.0.0.1:1" || c.App != "mine" || c.Image != "ubuntu:24.04" || c.IdleTimeout != 10*time.Minute || c.User != "agent" || c.Environment != "dev" || c.Port != 4000 {
		t.Errorf("API config: %+v", c)
	}
	if rc.Port != 4000 || rc.User != "agent" || rc.MaxLifetime != MaxTimeout {
		t.Errorf("remote config: %+v", rc)
	}
	if len(rc.Secret) == 0 || bytes.Contains(rc.Secret, []byte("as-one-secret")) {
		t.Errorf("secret %x: want one derived from the token, not the token", rc.Secret)
	}
	api2, rc2, err := Open(t.Context(), provider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer api2.Close()
	if !bytes.Equal(rc.Secret, rc2.Secret) {
		t.Error("two workers with one token derive two secrets")
	}
	if api2.cfg.App != DefaultApp || api2.cfg.Image != DefaultImage || api2.cfg.User != DefaultUser || api2.cfg.Port != defaultPort {
		t.Errorf("defaults: %+v", api2.cfg)
	}

	dir := t.TempDir()
	idFile, secretFile := filepath.Join(dir, "id"), filepath.Join(dir, "secret")
	os.WriteFile(idFile, []byte("ak-file\n"), 0o600)
	os.WriteFile(secretFile, []byte("as-file-secret\n"), 0o600)
	api3, _, err := Open(t.Context(), provider.Config{"token-id-file": idFile, "token-secret-file": secretFile})
	if err != nil {
		t.Fatal(err)
	}
	api3.Close()
	if api3.cfg.TokenID != "ak-file" || api3.cfg.TokenSecret != "as-file-secret" {
		t.Errorf("token from files: %q %q", api3.cfg.TokenID, api3.cfg.TokenSecret)
	}
	t.Setenv("OTHER_SECRET", "as-other")
	api4, _, err := Open(t.Context(), provider.Config{"token-secret-env": "OTHER_SECRET"})
	if err != nil {
		t.Fatal(err)
	}
	api4.Close()
	if api4.cfg.TokenSecret != "as-other" {
		t.Errorf("token secret from $OTHER_SECRET: %q", api4.cfg.TokenSecret)
	}

	for _, pc := range []provider.Config{
		{"bogus": "1"},
		{"server-url": "ftp://x"},
		{"server-url": "http://host/path"},
		{"idle-timeout": "soon"},
		{"idle-timeout": "1500ms"},
		{"user": "a b"},
		{"tunnel-ca-file": filepath.Join(dir, "none.pem")},
		{"tunnel-ca-file": idFile},
		{"token-id-env": "X", "token-id-file": idFile},
	} {
		_, _, err := Open(t.Context(), pc)
		if !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("%v: %v, want BadInput", pc, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || strings.Contains(msg, "as-one-secret") {
			t.Errorf("%v: %q is not one line free of the token", pc, msg)
		}
	}
	if _, _, err := Open(t.Context(), provider.Config{"token-id-file": filepath.Join(dir, "nothing")}); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("a token file missing: %v, want ProviderAuth", err)
	}
}
