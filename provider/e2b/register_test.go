package e2b

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// TestSecretFromKey: a worker given no daemons' secret derives it from
// the API key, so that two workers (or one restarted) with the key reach
// the same daemons; a secret of its own wins; the key is not the secret.
func TestSecretFromKey(t *testing.T) {
	open := func(key string, extra provider.Config) []byte {
		t.Helper()
		t.Setenv(DefaultAPIKeyEnv, key)
		t.Setenv(DefaultSecretEnv, "")
		pc := provider.Config{"state-dir": t.TempDir()}
		for k, v := range extra {
			pc[k] = v
		}
		_, rc, err := Open(t.Context(), pc)
		if err != nil {
			t.Fatal(err)
		}
		return rc.Secret
	}
	a, b := open("e2b_key_one", nil), open("e2b_key_one", nil)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Errorf("two workers with one key and no secret: secrets %x and %x, want one, not empty", a, b)
	}
	if c := open("e2b_key_two", nil); bytes.Equal(a, c) {
		t.Error("two keys gave one secret")
	}
	if strings.Contains(string(a), "e2b_key_one") {
		t.Error("the secret holds the key")
	}
	t.Setenv("MY_SECRET", "own")
	if own := open("e2b_key_one", provider.Config{"secret-env": "MY_SECRET"}); string(own) != "own" {
		t.Errorf("secret-env: secret %q, want %q", own, "own")
	}
}

// TestMaxLifetime: the plan's cap (max-lifetime, an hour unless set) is
// the provider's MaxLifetime, so that the sandbox handle moves a sandbox
// that would outlive it.
func TestMaxLifetime(t *testing.T) {
	t.Setenv(DefaultAPIKeyEnv, "e2b_key_lifetime")
	for set, want := range map[string]time.Duration{"": DefaultMaxLifetime, "24h": 24 * time.Hour} {
		pc := provider.Config{"state-dir": t.TempDir()}
		if set != "" {
			pc["max-lifetime"] = set
		}
		p, err := provider.Open(t.Context(), Name, pc)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Capabilities().MaxLifetime; got != want {
			t.Errorf("max-lifetime %q: MaxLifetime %v, want %v", set, got, want)
		}
	}
}
