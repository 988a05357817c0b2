package gke

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestOpenBadSettings: a setting that cannot work is refused at Open,
// one line, ErrBadInput.
func TestOpenBadSettings(t *testing.T) {
	t.Setenv(DefaultSecretEnv, "a secret")
	ok := provider.Config{"template": "t", "router-url": "http://127.0.0.1:1", "state-dir": t.TempDir()}
	for name, change := range map[string]provider.Config{
		"no template":     {"template": ""},
		"bad template":    {"template": "Not_A_Name"},
		"no router":       {"router-url": ""},
		"bad router":      {"router-url": "ftp://x"},
		"bad namespace":   {"namespace": "a.b"},
		"bad endpoint":    {"endpoint": "router"},
		"relative baked":  {"daemon-baked": "opt/berth-sandboxd"},
		"unknown setting": {"bogus": "1"},
		"bad warm pool":   {"warm-pool": "UPPER"},
	} {
		pc := provider.Config{}
		for k, v := range ok {
			pc[k] = v
		}
		for k, v := range change {
			if v == "" {
				delete(pc, k)
			} else {
				pc[k] = v
			}
		}
		_, _, err := Open(t.Context(), pc)
		if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line of bad input", name, err)
		}
	}
	if _, _, err := Open(t.Context(), provider.Config{"template": "t", "router-url": "http://127.0.0.1:1", "kubeconfig": "/nonexistent/kubeconfig"}); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("a kubeconfig that is not there: %v, want auth", err)
	}
}
