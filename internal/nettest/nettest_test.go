package nettest

import (
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

func TestTopologyReachesItsHosts(t *testing.T) {
	tp := New(t)
	for name, h := range tp.Hosts {
		c, err := Dial(tp.UplinkNS, "tcp4", netip.AddrPortFrom(h.Addr, HTTPPort).String(), 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s from the uplink: %v", name, err)
		}
		io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
		b, _ := io.ReadAll(c)
		c.Close()
		if !strings.Contains(string(b), h.Name) {
			t.Errorf("%s answered %q", name, b)
		}
		if hits := h.Hits(); len(hits) != 1 || hits[0].From != HostAddr {
			t.Errorf("%s hits = %v, want one from %s", name, hits, HostAddr)
		}
	}
	addrs, err := tp.Resolver().LookupNetIP(t.Context(), "ip4", "pypi.org")
	if err != nil || len(addrs) != 1 || addrs[0] != PyPIAddr {
		t.Fatalf("resolve pypi.org = %v, %v", addrs, err)
	}
	tp.DNS.Set("pypi.org", MetadataAddr)
	if addrs, _ := tp.Resolver().LookupNetIP(t.Context(), "ip4", "pypi.org"); len(addrs) != 1 || addrs[0] != MetadataAddr {
		t.Fatalf("after rebinding pypi.org = %v", addrs)
	}
}

// The containment check must bite: a default route, or one to an
// address outside the topology, is refused.
func TestContainedRefusesRoutesOut(t *testing.T) {
	for _, dst := range []string{"0.0.0.0/0", "192.0.2.0/24"} {
		t.Run(dst, func(t *testing.T) {
			tp := New(t)
			nl, err := netlink.NewHandleAt(tp.UplinkNS)
			if err != nil {
				t.Fatal(err)
			}
			defer nl.Close()
			lo, _ := nl.LinkByName("lo")
			_, n, _ := net.ParseCIDR(dst)
			if err := nl.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: n}); err != nil {
				t.Fatal(err)
			}
			if err := tp.Contained(); err == nil {
				t.Fatalf("Contained accepted a route to %s", dst)
			}
		})
	}
}
