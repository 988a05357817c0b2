package linux

import (
	"os"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egresstest"
	"github.com/berth-dev/berth/provider/internal/hostnet/hostnettest"
	"github.com/berth-dev/berth/provider/internal/netns"
)

// egressPort is where the tests' egress proxy listens, on
// nettest.HostAddr in the uplink.
const egressPort = hostnettest.Port

// startEgress runs a real egress proxy in tp's uplink (egresstest.Start).
var startEgress = egresstest.Start

var randHex = hostnettest.RandHex

// netProvider is a Provider as hostnettest looks at it.
type netProvider struct{ *Provider }

func (p netProvider) Net() *netns.Manager { return p.net }
func (p netProvider) StateDir() string    { return p.cfg.StateDir }

var netHarness = hostnettest.Harness{
	Open: func(t testing.TB, c hostnettest.Config) hostnettest.Provider {
		dir := c.StateDir
		if dir == "" {
			dir = shortTempDir(t)
		}
		p, err := New(Config{StateDir: dir, DaemonPath: os.Getenv("BERTH_TEST_DAEMON"), Pool: c.Pool, Network: c.Network})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { destroyAll(t, p) })
		return netProvider{p}
	},
	Kill: func(t *testing.T, _ hostnettest.Provider, sb provider.Sandbox) {
		s := sb.(*sandbox)
		hostnettest.KillProcess(t, s.rec.PID, s.rec.alive)
	},
	AttachLater: true,
}

// TestHostNetwork holds linux sandboxes' networks to hostnettest's tests:
// providertest's Network group (the attack cases among it) and the host
// side's own.
func TestHostNetwork(t *testing.T) { hostnettest.Run(t, netHarness) }

// BenchmarkCreateNetwork measures what a network adds to a cold
// creation (hostnettest.BenchmarkCreate).
func BenchmarkCreateNetwork(b *testing.B) { hostnettest.BenchmarkCreate(b, netHarness, nil) }
