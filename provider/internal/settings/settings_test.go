package settings

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestDecode: each known setting's text lands in its typed field, from
// any of the tables given; an unknown setting or a value that does not
// decode is bad input, named.
func TestDecode(t *testing.T) {
	var (
		dir  string
		idle time.Duration
		res  provider.Resources
	)
	own := map[string]Setting{"state_dir": String(&dir), "idle": Duration(&idle)}
	err := Decode("linux", provider.Config{"state_dir": "/var/lib/x", "idle": "90s", "memory": "1048576", "cpu": "1.5"},
		own, Resources(&res))
	if err != nil {
		t.Fatal(err)
	}
	if dir != "/var/lib/x" || idle != 90*time.Second || res.Memory != 1<<20 || res.CPU != 1.5 {
		t.Errorf("decoded state_dir %q, idle %v, memory %d, cpu %v", dir, idle, res.Memory, res.CPU)
	}
	for name, pc := range map[string]provider.Config{
		"unknown":      {"colour": "blue"},
		"not a number": {"memory": "lots"},
		"bad duration": {"idle": "soon"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := Decode("linux", pc, own, Resources(&res)); !errors.Is(err, errdefs.ErrBadInput) {
				t.Errorf("Decode(%v) = %v, want bad input", pc, err)
			}
		})
	}
}

// TestFill: a limit left zero takes the default; one set stays.
func TestFill(t *testing.T) {
	got := Fill(provider.Resources{Memory: 5}, provider.Resources{Memory: 1, Pids: 2, CPU: 3, Disk: 4})
	if want := (provider.Resources{Memory: 5, Pids: 2, CPU: 3, Disk: 4}); got != want {
		t.Errorf("Fill = %+v, want %+v", got, want)
	}
}

// TestAPIKey: the key comes from the variable or the file the settings
// name; both set is bad input; none found is an auth error that names
// where it looked and never holds a key.
func TestAPIKey(t *testing.T) {
	t.Setenv("SVC_KEY", " key-from-env\n")
	if k, err := APIKey("svc", provider.Config{}, "SVC_KEY", ""); err != nil || k != "key-from-env" {
		t.Errorf("from env: %q, %v", k, err)
	}
	f := t.TempDir() + "/key"
	if err := os.WriteFile(f, []byte("key-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := APIKey("svc", provider.Config{"api-key-file": f}, "SVC_KEY", f); err != nil || k != "key-from-file" {
		t.Errorf("from file: %q, %v", k, err)
	}
	if _, err := APIKey("svc", provider.Config{"api-key-file": f, "api-key-env": "X"}, "X", f); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("both set: %v, want bad input", err)
	}
	t.Setenv("SVC_KEY", "")
	_, err := APIKey("svc", provider.Config{}, "SVC_KEY", "")
	if !errors.Is(err, errdefs.ErrProviderAuth) || !strings.Contains(err.Error(), "$SVC_KEY") {
		t.Errorf("no key: %v, want an auth error naming $SVC_KEY", err)
	}
	empty := t.TempDir() + "/empty"
	_ = os.WriteFile(empty, nil, 0o600)
	if _, err := APIKey("svc", provider.Config{}, "SVC_KEY", empty); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("empty file: %v, want an auth error", err)
	}
	if _, err := APIKey("svc", provider.Config{}, "SVC_KEY", t.TempDir()+"/missing"); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("missing file: %v, want an auth error", err)
	}
}
