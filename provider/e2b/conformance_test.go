package e2b_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/providertest"
	"github.com/berth-dev/berth/provider/remote"
)

// TestConformance runs berth's provider suite over the registered e2b
// provider (package remote over this package's API) against the fake:
// berth-sandboxd uploaded into each sandbox, started through envd and
// reached through E2B's port proxy.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	daemon := filepath.Join(dir, "berth-sandboxd")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", daemon, "github.com/berth-dev/berth/cmd/berth-sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build berth-sandboxd: %v\n%s", err, out)
	}
	f, err := e2bfake.New(t.Context(), e2bfake.Options{Farm: farm, APIKey: testKey, MaxSandboxes: 200})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			t.Errorf("spec violations:\n%s", strings.Join(v, "\n"))
		}
	})
	t.Setenv("E2B_API_KEY", testKey)
	t.Setenv(e2b.DefaultSecretEnv, "the e2b tests' secret")
	pc := provider.Config{"api-url": f.URL(), "sandbox-url": f.SandboxURL(), "daemon": daemon, "max-lifetime": "24h"}
	hostPIDs := func(t *testing.T, sb provider.Sandbox) []int {
		t.Helper()
		rm, ok := sb.(interface{ Machine() remote.Machine })
		if !ok {
			t.Fatalf("not a remote sandbox: %T", sb)
		}
		// A sandbox E2B ended has no machine, and no processes.
		m, err := farm.Machine(rm.Machine().ID)
		if err != nil {
			return nil
		}
		pids, err := m.HostPIDs()
		if err != nil {
			if !slices.Contains(f.Sandboxes(), rm.Machine().ID) {
				return nil // being destroyed
			}
			t.Fatal(err)
		}
		return pids
	}
	providertest.Run(t, providertest.Harness{
		Open: func(t *testing.T) provider.Provider {
			p, err := provider.Open(t.Context(), e2b.Name, pc)
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		Processes: hostPIDs,
		DaemonRSS: func(t *testing.T, sb provider.Sandbox) int64 {
			for _, pid := range hostPIDs(t, sb) {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				if err != nil || !strings.Contains(string(b), "berth-sandboxd") {
					continue
				}
				st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
				if err != nil {
					continue
				}
				return sandboxtest.VmRSS(t, string(st))
			}
			t.Fatal("no daemon among the machine's processes")
			return 0
		},
	})
}
