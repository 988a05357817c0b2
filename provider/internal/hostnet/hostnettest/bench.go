package hostnettest

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
)

// BenchmarkCreate measures creating a sandbox and getting the result of
// /bin/true in it, with an allow list and with none, on a provider with
// a network and no pool: what a network adds to a cold creation.
// Destroying it is not timed; wait, if set, waits for what a destroy
// left to do in the background.
func BenchmarkCreate(b *testing.B, h Harness, wait func(Provider)) {
	allow := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	for _, c := range []struct {
		name   string
		policy provider.Network
	}{{"none", provider.Network{}}, {"allow", allow}} {
		b.Run(c.name, func(b *testing.B) {
			tp := nettest.New(b)
			proxy := tp.StartProxy(Port)
			p := h.Open(b, Config{Pool: -1, Network: hostnet.NetworkConfig{ProxyAddr: proxy.Addr, Uplink: tp.Uplink}})
			for b.Loop() {
				sb, err := p.Create(b.Context(), provider.Spec{Network: c.policy})
				if err != nil {
					b.Fatal(err)
				}
				if res, err := sb.Exec(b.Context(), provider.ExecRequest{Argv: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
					b.Fatalf("exec: %+v, %v", res, err)
				}
				b.StopTimer()
				if err := sb.Destroy(context.Background()); err != nil {
					b.Fatal(err)
				}
				if wait != nil {
					wait(p)
				}
				b.StartTimer()
			}
		})
	}
}
