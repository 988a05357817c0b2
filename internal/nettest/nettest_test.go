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

func TestHostsRecordRequestsAndServeBytes(t *testing.T) {
	tp := New(t)
	c, err := tp.DialUplink(t.Context(), "tcp4", netip.AddrPortFrom(PyPIAddr, HTTPPort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /bytes/100000 HTTP/1.0\r\nHost: pypi.org\r\nX-Probe: 1\r\n\r\n")
	b, _ := io.ReadAll(c)
	if _, body, _ := strings.Cut(string(b), "\r\n\r\n"); len(body) != 100000 {
		t.Errorf("/bytes/100000 served %d bytes", len(body))
	}
	reqs := tp.Hosts["pypi.org"].Requests()
	if len(reqs) != 1 || reqs[0].Host != "pypi.org" || reqs[0].Path != "/bytes/100000" || reqs[0].Header.Get("X-Probe") != "1" {
		t.Errorf("requests = %+v", reqs)
	}
	addrs, err := tp.UplinkAddrs()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range addrs {
		found = found || a == HostAddr
	}
	if !found {
		t.Errorf("uplink addresses %v lack %s", addrs, HostAddr)
	}
}
