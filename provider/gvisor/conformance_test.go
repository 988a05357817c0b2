package gvisor

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/providertest"
)

func TestConformance(t *testing.T) {
	p := newTestProvider(t, Config{})
	providertest.Run(t, providertest.Harness{
		// gVisor's kernel has no memory cgroup: the daemon polls what the
		// sandbox uses (the sentry's cache of files included).
		ApproximateMemory: "the daemon polls gVisor's memory use",
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
		DaemonRSS: daemonRSS,
		DaemonSocket: func(t *testing.T, sb provider.Sandbox) string {
			return p.socket(sb.(*sandbox).rec.Container, gvisorinit.SocketName)
		},
		// The sentry and the gofer: every task of the sandbox runs in
		// the sentry, whose timers and gofer take some 50 ms a second
		// at rest on a loaded machine.
		IdleCPU: 150 * time.Millisecond,
		Processes: func(t *testing.T, sb provider.Sandbox) []int {
			return sandboxtest.CgroupProcs(filepath.Join(memoryCgroupDir(sb.(*sandbox).rec.Container), "cgroup.procs"))
		},
	})
}

// daemonRSS reads the resident memory of a sandbox's daemon, the first
// process of its container, as gVisor's sentry counts it.
func daemonRSS(t *testing.T, sb provider.Sandbox) int64 {
	t.Helper()
	var out bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"cat", "/proc/1/status"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("read the daemon's status: exit %d, %v", res.ExitCode, err)
	}
	return sandboxtest.VmRSS(t, out.String())
}
