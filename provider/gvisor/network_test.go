package gvisor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet/hostnettest"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

// netProvider is a Provider as hostnettest looks at it.
type netProvider struct{ *Provider }

func (p netProvider) Net() *netns.Manager { return p.net }
func (p netProvider) StateDir() string    { return p.cfg.StateDir }

var netHarness = hostnettest.Harness{
	Open: func(t testing.TB, c hostnettest.Config) hostnettest.Provider {
		p := newTestProvider(t, Config{StateDir: c.StateDir, Pool: c.Pool, Network: c.Network})
		t.Cleanup(func() { sandboxtest.DestroyAll(t, p) })
		return netProvider{p}
	},
	Kill: func(t *testing.T, _ hostnettest.Provider, sb provider.Sandbox) {
		s := sb.(*sandbox)
		hostnettest.KillProcess(t, s.rec.PID, s.rec.alive)
	},
	Residue: func(t *testing.T, hp hostnettest.Provider) int {
		p := hp.(netProvider)
		p.cleanups.Wait()
		entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, containersDir))
		return len(entries)
	},
	// gVisor's network stack takes its interfaces as the sandbox starts.
	AttachLater: false,
}

// TestHostNetwork holds gVisor sandboxes' networks to hostnettest's tests:
// providertest's Network group (the attack cases among it) and the host
// side's own. gVisor's own network stack sends their packets down the
// veth, where the host's rules hold them.
func TestHostNetwork(t *testing.T) { hostnettest.Run(t, netHarness) }

// BenchmarkCreateNetwork measures what a network adds to a cold
// creation (hostnettest.BenchmarkCreate).
func BenchmarkCreateNetwork(b *testing.B) {
	hostnettest.BenchmarkCreate(b, netHarness, func(p hostnettest.Provider) { p.(netProvider).cleanups.Wait() })
}
