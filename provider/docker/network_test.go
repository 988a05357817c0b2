package docker

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/egresstest"
	"github.com/berth-dev/berth/provider/providertest"
)

type netEnv struct {
	tp    *nettest.Topology
	proxy *egress.Proxy
	p     *Provider
}

// newNetProvider opens a provider whose sandboxes' networks go into the
// contained topology's uplink. pool is Config.Pool, addrs
// Config.Network.Pool.
func newNetProvider(t *testing.T, pool int, addrs netip.Prefix) *netEnv {
	tp := nettest.New(t)
	proxy, addr := egresstest.Start(t, tp, 15001, nil)
	p := newTestProvider(t, Config{Pool: pool,
		Network: NetworkConfig{ProxyAddr: addr, Uplink: tp.Uplink, Pool: addrs, Resolver: tp.Resolver(), Egress: proxy}})
	return &netEnv{tp: tp, proxy: proxy, p: p}
}

// TestNetworkPoolFull fills the address pool: the next sandbox of a
// network is refused (ErrQuota) after its container was made, and
// nothing of it is left; a sandbox of none is still made, and once a
// slot is free a network sandbox is again.
func TestNetworkPoolFull(t *testing.T) {
	e := newNetProvider(t, -1, netip.MustParsePrefix("100.96.0.0/28")) // the smallest: three slots
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	var a *sandbox
	for i := range 3 {
		a = create(t, e.p, provider.Spec{ID: "first" + strconv.Itoa(i), Network: policy})
	}
	_, err := e.p.Create(t.Context(), provider.Spec{ID: "second", Network: policy})
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("a sandbox past the pool: %v, want quota", err)
	}
	e.left(t, "second")
	if _, err := e.p.Get(t.Context(), "second"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a sandbox whose network failed exists: %v", err)
	}
	if ids := containers(t, e.p); len(ids) != 3 {
		t.Errorf("containers left: %d, want the first sandboxes' alone", len(ids))
	}
	create(t, e.p, provider.Spec{ID: "closed"})
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	create(t, e.p, provider.Spec{ID: "second", Network: policy})
}

func (e *netEnv) targets() *providertest.NetworkTargets {
	hosts := e.tp.Hosts
	return &providertest.NetworkTargets{
		Allowed: netip.AddrPortFrom(nettest.PyPIAddr, nettest.HTTPPort), AllowedName: "pypi.org", UDPPort: nettest.UDPPort,
		Forbidden: map[string]netip.AddrPort{
			"metadata": netip.AddrPortFrom(nettest.MetadataAddr, nettest.HTTPPort),
			"private":  netip.AddrPortFrom(nettest.PrivateAddr, nettest.HTTPPort),
			"host":     netip.AddrPortFrom(nettest.HostAddr, 8080),
		},
		Unlisted: netip.AddrPortFrom(nettest.EvilAddr, nettest.HTTPPort), UnlistedName: "evil.example",
		Listable: "private",
		Reached: func(a netip.Addr) bool {
			for _, h := range hosts {
				if h.Addr == a && len(h.Hits()) > 0 {
					return true
				}
			}
			return false
		},
	}
}

// TestNetworkConformance holds Docker sandboxes to providertest's
// Network group: allow lists, open without private, metadata or host
// ranges, none, live updates; warm containers among them.
func TestNetworkConformance(t *testing.T) {
	e := newNetProvider(t, 0, netip.Prefix{})
	// A service of "the host", which no sandbox may reach.
	ln, err := nettest.Listen(e.tp.UplinkNS, "tcp4", netip.AddrPortFrom(nettest.HostAddr, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	providertest.RunNetwork(t, providertest.Harness{
		Open:    func(t *testing.T) provider.Provider { return e.p },
		Network: e.targets(),
	})
	if err := e.tp.Contained(netip.MustParsePrefix("100.96.0.0/16")); err != nil {
		t.Fatal(err)
	}
}

// TestNetworkNamesGoToTheProxy resolves an allowed name inside a
// sandbox, through the resolv.conf the provider mounts and the DNS
// stub, and connects: the connection reaches the proxy, aimed at the
// service address. An unlisted name does not resolve.
func TestNetworkNamesGoToTheProxy(t *testing.T) {
	e := newNetProvider(t, -1, netip.Prefix{})
	sb := create(t, e.p, provider.Spec{ID: "names", Network: provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}})
	out := sh(t, sb, `cat /etc/resolv.conf; /usr/bin/python3 -c '
import socket
print("pypi.org is", socket.gethostbyname("pypi.org"))
try:
    print("evil.example is", socket.gethostbyname("evil.example"))
except OSError:
    print("evil.example refused")
s = socket.create_connection(("pypi.org", 80), timeout=5)
s.sendall(b"GET / HTTP/1.0\r\nHost: pypi.org\r\n\r\n")
print(s.recv(4096).decode())
'`)
	service := e.p.net.ServiceAddr().String()
	for _, want := range []string{"nameserver " + service, "pypi.org is " + service, "evil.example refused", "\npypi.org"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox printed %q, want %q in it", out, want)
		}
	}
	// The real proxy took it, knowing the sandbox (netns registered it),
	// and relayed it to pypi.org's server by name.
	if st := e.proxy.Stats(); st.Accepted != 1 {
		t.Errorf("the proxy accepted %d connections, want 1 (refused: %v)", st.Accepted, st.Refused)
	}
	if n := len(e.tp.Hosts["pypi.org"].Requests()); n != 1 {
		t.Errorf("pypi.org got %d requests, want 1", n)
	}
	// The mounted resolv.conf is not the sandbox's to change.
	if code := run(t, sb, "sh", "-c", "echo nameserver 203.0.113.53 > /etc/resolv.conf"); code == 0 {
		t.Error("a sandbox rewrote its resolv.conf")
	}
	// Raw sockets: the sandbox's user holds no capability for them.
	if code := run(t, sb, "/usr/bin/python3", "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 253)"); code == 0 {
		t.Error("a sandbox opened a raw socket")
	}
}

func run(t *testing.T, sb provider.Sandbox, argv ...string) int {
	t.Helper()
	var stderr bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: argv, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode
}

// TestNetworkDestroyAndKill checks that Destroy leaves nothing of a
// sandbox's network, that a sandbox whose container is killed from
// outside leaves what the next sweep removes, and that a provider
// opened after a crash sweeps as it opens.
func TestNetworkDestroyAndKill(t *testing.T) {
	e := newNetProvider(t, -1, netip.Prefix{})
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	a := create(t, e.p, provider.Spec{ID: "net-destroyed", Network: policy})
	b := create(t, e.p, provider.Spec{ID: "net-killed", Network: policy})
	c := create(t, e.p, provider.Spec{ID: "net-none"})
	e.left(t, "net-none")
	e.kept(t, "net-killed")
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-destroyed")
	e.killContainer(t, b)
	if err := e.p.SweepNetworks(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-killed")
	// Destroy finishes a lost sandbox's removal without complaint.
	if err := b.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	d := create(t, e.p, provider.Spec{ID: "net-crashed", Network: policy})
	e.killContainer(t, d)
	q, err := New(t.Context(), e.p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	e.left(t, "net-crashed")
	// The sandbox of none, and its container, were left alone.
	sh(t, c, "true")
}

// TestNetworkUpdateFromNone attaches a network to a running sandbox
// created without one, from a warm container, and takes it away again.
func TestNetworkUpdateFromNone(t *testing.T) {
	e := newNetProvider(t, 1, netip.Prefix{})
	create(t, e.p, provider.Spec{ID: "fill"}) // the pool fills from the first creation
	sb := create(t, e.p, provider.Spec{ID: "later"})
	probe := `/usr/bin/python3 -c '
import socket
try:
    socket.create_connection(("203.0.113.10", 80), timeout=2).close()
    print("reached")
except OSError as e:
    print("unreached", type(e).__name__)
'`
	if out := sh(t, sb, probe); !strings.Contains(out, "unreached") {
		t.Fatalf("a sandbox without a network: %q", out)
	}
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	if err := sb.UpdateNetwork(t.Context(), policy); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, sb, probe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
		t.Errorf("a sandbox given a network by UpdateNetwork: %q", out)
	}
	if err := sb.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
		t.Fatal(err)
	}
	e.left(t, "later")
	if out := sh(t, sb, probe); !strings.Contains(out, "unreached") {
		t.Errorf("a sandbox whose network UpdateNetwork took away: %q", out)
	}
	if out := sh(t, sb, "ls /sys/class/net"); strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces once the network is taken away: %q", out)
	}
	if err := sb.UpdateNetwork(t.Context(), provider.Network{Mode: provider.NetworkAllow}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("UpdateNetwork with an allow list of nothing: %v, want bad input", err)
	}
}

func (e *netEnv) killContainer(t *testing.T, sb *sandbox) {
	t.Helper()
	if _, err := e.p.docker.ContainerKill(t.Context(), sb.rec.Container, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "container stopped", startTimeout, func() bool { return !sb.running(context.Background()) })
}

// left fails the test if anything of id's network is left.
func (e *netEnv) left(t *testing.T, id string) {
	t.Helper()
	left, err := e.p.net.Leftovers(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left of %s's network: %s", id, strings.Join(left, ", "))
	}
}

// kept fails the test unless id's network is whole: veth, table, slot.
func (e *netEnv) kept(t *testing.T, id string) {
	t.Helper()
	left, err := e.p.net.Leftovers(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 4 {
		t.Errorf("%s's network holds %q, want its veth, table, record and slot", id, left)
	}
}

// BenchmarkCreateNetwork measures creating a sandbox and getting the
// result of /bin/true in it, with an allow list and with none, on a
// provider with Config.Network and no pool: what a network adds to a
// cold creation. Destroying it is not timed.
func BenchmarkCreateNetwork(b *testing.B) {
	allow := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	for _, c := range []struct {
		name   string
		policy provider.Network
	}{{"none", provider.Network{}}, {"allow", allow}} {
		b.Run(c.name, func(b *testing.B) {
			tp := nettest.New(b)
			proxy := tp.StartProxy(15001)
			p := newTestProvider(b, Config{Pool: -1, Network: NetworkConfig{ProxyAddr: proxy.Addr, Uplink: tp.Uplink}})
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
				b.StartTimer()
			}
		})
	}
}
