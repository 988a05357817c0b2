package docker

import (
	"context"
	"testing"

	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/internal/testkit"
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
	Kill: func(t *testing.T, p hostnettest.Provider, sb provider.Sandbox) {
		s := sb.(*sandbox)
		d := p.(netProvider).docker
		if _, err := d.ContainerKill(t.Context(), s.rec.Container, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "container stopped", startTimeout, func() bool { return !s.running(context.Background()) })
	},
	Residue: func(t *testing.T, p hostnettest.Provider) int { return len(containers(t, p.(netProvider).Provider)) },
	// A container's namespace takes a veth whenever it runs.
	AttachLater: true,
}

// TestHostNetwork holds Docker sandboxes' networks to hostnettest's tests:
// providertest's Network group (the attack cases among it) and the host
// side's own; warm containers among them.
func TestHostNetwork(t *testing.T) { hostnettest.Run(t, netHarness) }

// BenchmarkCreateNetwork measures what a network adds to a cold
// creation (hostnettest.BenchmarkCreate).
func BenchmarkCreateNetwork(b *testing.B) { hostnettest.BenchmarkCreate(b, netHarness, nil) }
