package agentcore

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

func testEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAOPENTEST00000000")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "open/test/secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// TestOpen: the settings reach the API and package remote; the daemons'
// secret derives from the secret key unless set, and is never the key.
func TestOpen(t *testing.T) {
	testEnv(t)
	t.Setenv(DefaultSecretEnv, "")
	api, rc, err := Open(t.Context(), provider.Config{
		"state-dir": t.TempDir(), "endpoint-url": "http://127.0.0.1:1", "region": "us-east-1",
		"code-interpreter": "mine-123", "port": "4000",
	})
	if err != nil {
		t.Fatal(err)
	}
	if api.cfg.EndpointURL != "http://127.0.0.1:1" || api.cfg.Identifier != "mine-123" || api.c.Options().Region != "us-east-1" {
		t.Errorf("API config: %+v, region %s", api.cfg, api.c.Options().Region)
	}
	if rc.Port != 4000 || rc.RemotePath != api.cfg.DaemonPath || len(rc.Secret) == 0 || strings.Contains(string(rc.Secret), "open/test/secret") {
		t.Errorf("remote config: %+v", rc)
	}
	if rc.MaxLifetime != MaxLifetime {
		t.Errorf("the provider's MaxLifetime is %v, want the service's %v", rc.MaxLifetime, MaxLifetime)
	}
	api, _, err = Open(t.Context(), provider.Config{})
	if err != nil || api.cfg.Identifier != DefaultIdentifier || api.c.Options().Region != "eu-west-1" {
		t.Errorf("the defaults: %v, %+v", err, api)
	}
	for set, want := range map[string]time.Duration{"1h": time.Hour, "9h": MaxLifetime} {
		_, rc, err := Open(t.Context(), provider.Config{"max-lifetime": set})
		if err != nil || rc.MaxLifetime != want {
			t.Errorf("max-lifetime %s: %v, MaxLifetime %v, want %v", set, err, rc.MaxLifetime, want)
		}
	}
}

// TestOpenBadSettings: a setting the provider cannot use is refused in
// one line, as bad input.
func TestOpenBadSettings(t *testing.T) {
	testEnv(t)
	for _, pc := range []provider.Config{
		{"bogus": "1"},
		{"endpoint-url": "ftp://x"},
		{"endpoint-url": "::"},
		{"code-interpreter": "no spaces allowed"},
		{"port": "many"},
	} {
		_, _, err := Open(t.Context(), pc)
		if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "open/test/secret") {
			t.Errorf("%v: %v, want one line of bad input", pc, err)
		}
	}
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, _, err := Open(t.Context(), provider.Config{}); !errors.Is(err, errdefs.ErrBadInput) || !strings.Contains(err.Error(), "region") {
		t.Errorf("no region: %v", err)
	}
}
