package linux

import (
	"os"
	"strconv"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/providertest"
)

func TestConformance(t *testing.T) {
	p := newTestProvider(t)
	providertest.Run(t, providertest.Harness{
		// A new Provider on the same state directory is what another
		// process on this host would open.
		Open: func(t *testing.T) provider.Provider {
			q, err := New(Config{StateDir: p.cfg.StateDir})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { q.Close() })
			return q
		},
		DaemonRSS: func(t *testing.T, sb provider.Sandbox) int64 {
			return daemonRSS(t, sb)
		},
		DaemonSocket: func(t *testing.T, sb provider.Sandbox) string {
			return socketPath(p.cfg.StateDir, sb.ID())
		},
		Processes: func(t *testing.T, sb provider.Sandbox) []int {
			cg, err := loadCgroup(sb.(*sandbox).rec.Cgroup)
			if err != nil {
				return nil // gone with the sandbox
			}
			pids, _ := cg.pids()
			return pids
		},
	})
}

// daemonRSS reads the resident memory of a sandbox's daemon.
func daemonRSS(t testing.TB, sb provider.Sandbox) int64 {
	t.Helper()
	s, ok := sb.(*sandbox)
	if !ok {
		t.Fatalf("not a linux sandbox: %T", sb)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.rec.PID) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	return sandboxtest.VmRSS(t, string(b))
}
