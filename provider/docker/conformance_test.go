package docker

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/providertest"
)

func TestConformance(t *testing.T) {
	p := newTestProvider(t, Config{})
	providertest.Run(t, providertest.Harness{
		// A new Provider on the same state directory is what another
		// process on this host would open.
		Open: func(t *testing.T) provider.Provider {
			return newTestProvider(t, Config{StateDir: p.cfg.StateDir})
		},
		DaemonRSS: daemonRSS,
		DaemonSocket: func(t *testing.T, sb provider.Sandbox) string {
			s := sb.(*sandbox)
			return filepath.Join(p.slotPath(s.rec.UID), runDir, socketName)
		},
		Processes: func(t *testing.T, sb provider.Sandbox) []int {
			return sandboxtest.CgroupProcs(filepath.Join(filepath.Dir(sb.(*sandbox).rec.Freezer), "cgroup.procs"))
		},
	})
}

// daemonRSS reads the resident memory of a sandbox's daemon, the
// container's first process.
func daemonRSS(t *testing.T, sb provider.Sandbox) int64 {
	t.Helper()
	s, ok := sb.(*sandbox)
	if !ok {
		t.Fatalf("not a docker sandbox: %T", sb)
	}
	insp, err := s.p.docker.ContainerInspect(context.Background(), s.rec.Container, inspectOpts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(insp.Container.State.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	return sandboxtest.VmRSS(t, string(b))
}
