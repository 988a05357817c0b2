package remote

import (
	"bytes"
	"errors"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestSplitConfig: this package's settings are read into a Config, the
// service's are passed on untouched, the host's state-dir dropped; a bad
// port and two secrets are bad input.
func TestSplitConfig(t *testing.T) {
	t.Setenv("SVC_SECRET", "s3cret")
	api, rc, err := SplitConfig("svc", provider.Config{
		"state-dir": "/var/lib/x", "daemon": "/bin/d", "port": "4000",
		"api-url": "http://svc", "template": "base",
	}, "SVC_SECRET")
	if err != nil {
		t.Fatal(err)
	}
	if len(api) != 2 || api["api-url"] != "http://svc" || api["template"] != "base" {
		t.Errorf("the service's settings: %v", api)
	}
	if rc.DaemonPath != "/bin/d" || rc.Port != 4000 || string(rc.Secret) != "s3cret" {
		t.Errorf("Config: %+v", rc)
	}
	t.Setenv("SVC_SECRET", "")
	if _, rc, _ := SplitConfig("svc", provider.Config{}, "SVC_SECRET"); len(rc.Secret) != 0 {
		t.Errorf("no secret set: %q, want none (the provider derives one)", rc.Secret)
	}
	if _, _, err := SplitConfig("svc", provider.Config{"port": "x"}, "SVC_SECRET"); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("port x: %v", err)
	}
	if _, _, err := SplitConfig("svc", provider.Config{"secret-env": "A", "secret-file": "/f"}, "SVC_SECRET"); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("two secrets: %v", err)
	}
	if a, b := KeySecret("e2b", "k"), KeySecret("daytona", "k"); bytes.Equal(a, b) {
		t.Error("one key gives two providers one secret")
	}
}
