package linux

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/providertest"
)

type netEnv struct {
	tp     *nettest.Topology
	egress *egress.Proxy
	p      *Provider
}

// newNetProvider opens a provider whose sandboxes' networks go into a
// nettest topology, through a real egress proxy in its uplink.
func newNetProvider(t *testing.T, mods ...func(*NetworkConfig)) *netEnv {
	tp := nettest.New(t)
	proxy, addr := startEgress(t, tp, egressPort, nil)
	cfg := Config{StateDir: shortTempDir(t), DaemonPath: os.Getenv("BERTH_TEST_DAEMON"),
		Network: NetworkConfig{ProxyAddr: addr, Uplink: tp.Uplink, Resolver: tp.Resolver(), Egress: proxy}}
	for _, mod := range mods {
		mod(&cfg.Network)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	return &netEnv{tp: tp, egress: proxy, p: p}
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

func TestNetworkConformance(t *testing.T) {
	e := newNetProvider(t)
	// A service of "the host", which no sandbox may reach.
	ln, err := nettest.Listen(e.tp.UplinkNS, "tcp4", netip.AddrPortFrom(nettest.HostAddr, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	targets := e.targets()
	providertest.RunNetwork(t, providertest.Harness{
		Open:    func(t *testing.T) provider.Provider { return e.p },
		Network: targets,
	})
	if err := e.tp.Contained(netip.MustParsePrefix("100.96.0.0/16")); err != nil {
		t.Fatal(err)
	}
}

// TestNetworkNamesGoToTheProxy resolves an allowed name inside a
// sandbox, through its resolv.conf and the DNS stub, and connects: the
// connection reaches the egress proxy, aimed at the service address,
// which relays it to the name's server.
func TestNetworkNamesGoToTheProxy(t *testing.T) {
	e := newNetProvider(t)
	sb := create(t, e.p, provider.Spec{ID: "names", Network: provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}})
	out := sh(t, sb, `cat /etc/resolv.conf; getent hosts pypi.org || echo none; getent hosts evil.example || echo refused; `+
		`/usr/bin/python3 -c 'import socket; s = socket.create_connection(("pypi.org", 80), timeout=5); s.sendall(b"GET / HTTP/1.0\r\nHost: pypi.org\r\n\r\n"); print(s.recv(4096).decode())'`)
	service := e.p.net.ServiceAddr().String()
	for _, want := range []string{"nameserver " + service, service + " ", "refused", "\npypi.org"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox printed %q, want %q in it", out, want)
		}
	}
	if s := e.egress.Stats(); s.Accepted != 1 {
		t.Errorf("the proxy accepted %d connections, want 1", s.Accepted)
	}
	// Raw sockets: the sandbox's user holds no capability for them.
	r := providertestRun(t, sb, "/usr/bin/python3", "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 253)")
	if r == 0 {
		t.Error("a sandbox opened a raw socket")
	}
}

func providertestRun(t *testing.T, sb provider.Sandbox, argv ...string) int {
	t.Helper()
	var stderr bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: argv, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode
}

// TestNetworkDestroyAndKill checks that Destroy leaves nothing of a
// sandbox's network, and that a sandbox killed from outside leaves what
// the next sweep removes.
func TestNetworkDestroyAndKill(t *testing.T) {
	e := newNetProvider(t)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	a := create(t, e.p, provider.Spec{ID: "net-destroyed", Network: policy})
	b := create(t, e.p, provider.Spec{ID: "net-killed", Network: policy})
	c := create(t, e.p, provider.Spec{ID: "net-none"})
	if _, err := e.p.net.Link("net-none"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a sandbox of NetworkNone has a link: %v", err)
	}
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "net-destroyed")
	if err := unix.Kill(b.rec.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "daemon gone", 5*time.Second, func() bool { return !b.rec.alive() })
	if err := e.p.SweepNetworks(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "net-killed")
	// A provider opened after a crash sweeps as it opens: a link left
	// by a process that died is gone once it has.
	d := create(t, e.p, provider.Spec{ID: "net-crashed", Network: policy})
	if err := unix.Kill(d.rec.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "daemon gone", 5*time.Second, func() bool { return !d.rec.alive() })
	q, err := New(e.p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	e.gone(t, "net-crashed")
	_ = c
}

func (e *netEnv) gone(t *testing.T, id string) {
	t.Helper()
	nl, err := netlink.NewHandleAt(e.tp.UplinkNS)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	links, _ := nl.LinkList()
	for _, l := range links {
		if _, ok := l.(*netlink.Veth); ok && strings.HasPrefix(l.Attrs().Name, "bth") {
			if _, err := e.p.net.Link(id); err != nil {
				// Only the live sandboxes' veths may be left.
				if !e.ownedByLive(t, l.Attrs().Name) {
					t.Errorf("veth %s left", l.Attrs().Name)
				}
			}
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(e.tp.UplinkNS)))
	if err != nil {
		t.Fatal(err)
	}
	tables, _ := c.ListTables()
	for _, tb := range tables {
		if tb.Name == "berth-"+id {
			t.Errorf("table %s left", tb.Name)
		}
	}
	if _, err := e.p.net.Link(id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("slot of %s left: %v", id, err)
	}
	entries, _ := os.ReadDir(filepath.Join(e.p.cfg.StateDir, networkDir))
	for _, en := range entries {
		if b, _ := os.ReadFile(filepath.Join(e.p.cfg.StateDir, networkDir, en.Name())); strings.Contains(string(b), `"`+id+`"`) {
			t.Errorf("state file %s of %s left", en.Name(), id)
		}
	}
}

// ownedByLive says whether the veth is a live sandbox's.
func (e *netEnv) ownedByLive(t *testing.T, veth string) bool {
	infos, _ := e.p.List(t.Context(), nil)
	for _, info := range infos {
		if l, err := e.p.net.Link(info.ID); err == nil && l.Veth == veth {
			return true
		}
	}
	return false
}
