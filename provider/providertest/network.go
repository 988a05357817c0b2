package providertest

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
)

// NetworkTargets are test hosts that a provider's sandboxes can be aimed
// at, for the Network group: addresses of the test's own making (test
// hosts in network namespaces, say), never anything else.
type NetworkTargets struct {
	// Allowed serves HTTP on its port and answers datagrams on UDPPort,
	// each time with a body holding AllowedName.
	Allowed     netip.AddrPort
	AllowedName string
	UDPPort     uint16
	// Forbidden are hosts by the name they answer with (HTTP on their
	// port, datagrams on UDPPort): a cloud's metadata service, a host of
	// a private range, the sandbox host's own address. No sandbox may
	// reach one that its policy does not list.
	Forbidden map[string]netip.AddrPort
	// Unlisted serves HTTP as Allowed does, answering with UnlistedName:
	// an address an allow list does not name, which an open network
	// reaches.
	Unlisted     netip.AddrPort
	UnlistedName string
	// Listable is the one of Forbidden that a CIDR rule can open (a
	// host of a private range, not the sandbox host's own address).
	Listable string
	// Reached, if set, says whether anything of a sandbox reached addr,
	// as the test's servers saw it.
	Reached func(addr netip.Addr) bool

	// For the name-based cases (see network_names.go): AllowedName and
	// UnlistedName resolve, on the provider's host, to Allowed's and
	// Unlisted's addresses, and every host serves TLS on TLSPort with a
	// certificate of HostCA (PEM) for its name, and HTTP on OtherPort,
	// a port no allow list of the cases names.
	HostCA    []byte
	TLSPort   uint16
	OtherPort uint16
	// Hits, if set, counts the connections the host of name took on
	// port.
	Hits func(name string, port uint16) int
	// Requests, if set, are the HTTP requests the host of name served.
	Requests func(name string) []HostRequest
	// Rebind, if set, makes name resolve on the provider's host to addr
	// until restore is called.
	Rebind func(name string, addr netip.Addr) (restore func())
	// MaxProxyConns is the egress proxy's bound on one sandbox's
	// connections, as the harness set it (small, so the case is quick).
	MaxProxyConns int
	// Credential, if set, is the credential the provider's host holds
	// (see NetworkCredential).
	Credential *NetworkCredential
}

func networkTests() []test {
	tests := []test{
		// Serial, and in this order: Reached counts what reached a host
		// from any sandbox, and UpdateLive reaches a forbidden one.
		{name: "AllowCIDR", serial: true, fn: testAllowCIDR},
		{name: "AllowForbidden", serial: true, fn: testAllowForbidden},
		{name: "NoneReachesNothing", serial: true, fn: testNoneReachesNothing},
		{name: "OpenForbidden", serial: true, fn: testOpenForbidden},
	}
	tests = append(tests, nameTests()...)
	// Last: it reaches a forbidden host.
	return append(tests, test{name: "UpdateLive", serial: true, fn: testNetworkUpdate})
}

// RunNetwork runs the Network group alone.
func RunNetwork(t *testing.T, h Harness) {
	s := &suite{h: h, run: "net"}
	t.Run("Network", func(t *testing.T) { group{"Network", networkTests()}.run(t, s) })
}

// networkSkip skips a test without targets or without the capability.
func (s *suite) networkSkip(t *testing.T, open bool) provider.Provider {
	t.Helper()
	p := s.open(t)
	caps := p.Capabilities()
	switch {
	case open && !caps.Network:
		t.Skipf("skipped: provider %q offers no open network (Capabilities.Network is false)", p.Name())
	case !open && !caps.NetworkAllow:
		t.Skipf("skipped: provider %q does not enforce allow lists (Capabilities.NetworkAllow is false)", p.Name())
	case s.h.Network == nil:
		t.Skip("skipped: the harness names no network test hosts (Harness.Network)")
	}
	return p
}

// netProbe connects to each target from inside a sandbox and prints,
// one line each, what came back (or the error): TCP sends an HTTP
// request, UDP a datagram.
const netProbe = `
import socket, sys
for arg in sys.argv[1:]:
    proto, host, port = arg.split(",")
    try:
        if proto == "tcp":
            s = socket.create_connection((host, int(port)), timeout=2)
            s.sendall(b"GET / HTTP/1.0\r\n\r\n")
            out = b""
            while len(out) < 4096:
                b = s.recv(4096)
                if not b:
                    break
                out += b
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(2)
            s.sendto(b"hello", (host, int(port)))
            out = s.recv(512)
        s.close()
        print("ok", out.decode(errors="replace").replace("\n", " "))
    except Exception as e:
        print("err", type(e).__name__)
`

type probe struct {
	proto string
	addr  netip.AddrPort
}

func (p probe) String() string { return p.proto + " " + p.addr.String() }

func probeFrom(t *testing.T, sb provider.Sandbox, probes ...probe) []string {
	t.Helper()
	var args []string
	for _, p := range probes {
		args = append(args, fmt.Sprintf("%s,%s,%d", p.proto, p.addr.Addr(), p.addr.Port()))
	}
	lines := strings.Split(strings.TrimSpace(mustPython(t, sb, netProbe, args...)), "\n")
	if len(lines) != len(probes) {
		t.Fatalf("probe printed %q", lines)
	}
	return lines
}

func (s *suite) allowPolicy() provider.Network {
	n := s.h.Network
	return provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{n.Allowed.Addr().String()},
		Ports: []uint16{n.Allowed.Port(), n.UDPPort}}
}

func (s *suite) netSandbox(t *testing.T, p provider.Provider, policy provider.Network) provider.Sandbox {
	spec := s.newSpec(t)
	spec.Network = policy
	return s.mustCreate(t, p, spec)
}

func testAllowCIDR(t *testing.T, s *suite) {
	p := s.networkSkip(t, false)
	n := s.h.Network
	sb := s.netSandbox(t, p, s.allowPolicy())
	got := probeFrom(t, sb, probe{"tcp", n.Allowed}, probe{"udp", netip.AddrPortFrom(n.Allowed.Addr(), n.UDPPort)})
	for i, what := range []string{"TCP", "UDP"} {
		if !strings.HasPrefix(got[i], "ok") || !strings.Contains(got[i], n.AllowedName) {
			t.Errorf("%s to %s, which a CIDR rule lists: %q", what, n.Allowed.Addr(), got[i])
		}
	}
}

// checkForbidden probes every forbidden host by TCP and UDP: none may
// answer, and none may see anything of the sandbox.
func (s *suite) checkForbidden(t *testing.T, sb provider.Sandbox, except string) {
	t.Helper()
	n := s.h.Network
	var probes []probe
	var names []string
	for name, a := range n.Forbidden {
		if name == except {
			continue
		}
		probes = append(probes, probe{"tcp", a}, probe{"udp", netip.AddrPortFrom(a.Addr(), n.UDPPort)})
		names = append(names, name, name)
	}
	got := probeFrom(t, sb, probes...)
	for i, line := range got {
		if strings.HasPrefix(line, "ok") && strings.Contains(line, names[i]) {
			t.Errorf("%s (%s) answered a sandbox whose policy does not list it: %q", names[i], probes[i], line)
		}
	}
	if n.Reached != nil {
		for name, a := range n.Forbidden {
			if name != except && n.Reached(a.Addr()) {
				t.Errorf("%s (%s) was reached", name, a.Addr())
			}
		}
	}
}

func testAllowForbidden(t *testing.T, s *suite) {
	p := s.networkSkip(t, false)
	sb := s.netSandbox(t, p, s.allowPolicy())
	s.checkForbidden(t, sb, "")
	n := s.h.Network
	if !n.Unlisted.IsValid() {
		return
	}
	got := probeFrom(t, sb, probe{"tcp", n.Unlisted}, probe{"udp", netip.AddrPortFrom(n.Unlisted.Addr(), n.UDPPort)})
	for _, line := range got {
		if strings.Contains(line, n.UnlistedName) {
			t.Errorf("%s, which the allow list does not name, answered %q", n.UnlistedName, line)
		}
	}
	if n.Reached != nil && n.Reached(n.Unlisted.Addr()) {
		t.Errorf("%s was reached", n.UnlistedName)
	}
}

func testOpenForbidden(t *testing.T, s *suite) {
	p := s.networkSkip(t, true)
	n := s.h.Network
	sb := s.netSandbox(t, p, provider.Network{Mode: provider.NetworkOpen})
	if got := probeFrom(t, sb, probe{"tcp", n.Allowed}); !strings.Contains(got[0], n.AllowedName) {
		t.Errorf("an open sandbox could not reach %s: %q", n.Allowed, got[0])
	}
	s.checkForbidden(t, sb, "")
}

func testNoneReachesNothing(t *testing.T, s *suite) {
	p := s.networkSkip(t, false)
	n := s.h.Network
	sb := s.netSandbox(t, p, provider.Network{})
	got := probeFrom(t, sb, probe{"tcp", n.Allowed}, probe{"udp", netip.AddrPortFrom(n.Allowed.Addr(), n.UDPPort)})
	for _, line := range got {
		if strings.HasPrefix(line, "ok") {
			t.Errorf("a sandbox without a network reached %s: %q", n.Allowed, line)
		}
	}
}

// testNetworkUpdate lists a forbidden host, then takes it off again,
// while the sandbox runs.
func testNetworkUpdate(t *testing.T, s *suite) {
	p := s.networkSkip(t, false)
	n := s.h.Network
	sb := s.netSandbox(t, p, s.allowPolicy())
	u, ok := sb.(provider.NetworkUpdater)
	if !ok {
		t.Skipf("skipped: provider %q's sandboxes do not implement provider.NetworkUpdater", p.Name())
	}
	name, target := n.Listable, n.Forbidden[n.Listable]
	if !target.IsValid() {
		t.Skip("skipped: the harness names no listable host (NetworkTargets.Listable)")
	}
	policy := s.allowPolicy()
	policy.CIDRs = append(policy.CIDRs, target.Addr().String())
	policy.Ports = append(policy.Ports, target.Port())
	if err := u.UpdateNetwork(timeout(t, opTimeout), policy); err != nil {
		t.Fatalf("UpdateNetwork: %v", err)
	}
	if got := probeFrom(t, sb, probe{"tcp", target}); !strings.Contains(got[0], name) {
		t.Fatalf("%s, listed by UpdateNetwork, answered %q", name, got[0])
	}
	if err := u.UpdateNetwork(timeout(t, opTimeout), s.allowPolicy()); err != nil {
		t.Fatalf("UpdateNetwork: %v", err)
	}
	if got := probeFrom(t, sb, probe{"tcp", target}); strings.Contains(got[0], name) {
		t.Errorf("%s, no longer listed, still answered %q", name, got[0])
	}
	if err := u.UpdateNetwork(timeout(t, opTimeout), provider.Network{Mode: "bogus"}); err == nil {
		t.Error("UpdateNetwork took a policy of an unknown mode")
	}
}

// hexRun is what the credential case looks for in a sandbox: a
// credential's secret part.
var hexRun = regexp.MustCompile(`[0-9a-f]{32}`)

func itoa(n int) string { return strconv.Itoa(n) }

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}
