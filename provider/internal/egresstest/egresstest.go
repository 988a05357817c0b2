// Package egresstest runs a real egress proxy in a contained test
// topology (internal/nettest), as a host runs one, for the providers'
// network tests. It is for tests alone.
package egresstest

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider/internal/egress"
)

// Start runs a real egress proxy in tp's uplink, as a host runs
// one in its own namespace: it listens on HostAddr:port there, resolves
// names with the topology's DNS server, dials from the uplink, and knows
// the uplink's addresses as the host's own. mod, if set, changes its
// configuration before it starts.
func Start(t testing.TB, tp *nettest.Topology, port uint16, mod func(*egress.Config)) (*egress.Proxy, netip.AddrPort) {
	t.Helper()
	cfg := egress.Config{
		Resolver:  tp.Resolver(),
		Forbidden: Forbidden(t),
		HostAddrs: tp.UplinkAddrs,
		Dial:      tp.DialUplink,
		RootCAs:   tp.CA,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(nettest.HostAddr, port)
	ln, err := nettest.Listen(tp.UplinkNS, "tcp4", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	t.Cleanup(func() {
		p.Close()
		if err := <-done; !errors.Is(err, egress.ErrClosed) {
			t.Errorf("egress proxy: %v", err)
		}
	})
	return p, addr
}

// Forbidden is egress.DefaultForbidden less any range the
// topology's public test hosts lie in (none, today: they are in
// TEST-NET-3, which is not forbidden), checked to still forbid the
// metadata service and the private host. The host's own address is
// refused by HostAddrs, whatever the ranges.
func Forbidden(t testing.TB) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, p := range egress.DefaultForbidden() {
		if !p.Contains(nettest.PyPIAddr) && !p.Contains(nettest.EvilAddr) {
			out = append(out, p)
		}
	}
	for _, a := range []netip.Addr{nettest.MetadataAddr, nettest.PrivateAddr} {
		in := false
		for _, p := range out {
			in = in || p.Contains(a)
		}
		if !in {
			t.Fatalf("the test's forbidden ranges let %s through", a)
		}
	}
	return out
}
