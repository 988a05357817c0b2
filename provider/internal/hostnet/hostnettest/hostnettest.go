// Package hostnettest holds the linux, docker and gvisor providers'
// sandboxes' networks to one set of tests, over the contained topology
// (internal/nettest) and a real egress proxy in its uplink
// (egresstest): providertest's Network group, the attack cases among
// it, and what is the host side's own (the DNS stub and resolv.conf,
// destroying and killing sandboxes, a full pool, live updates, a
// restarted proxy, credentials and the proxy's authority). Each
// provider's network test is a call of Run with a Harness. It is for
// tests alone.
package hostnettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/egresstest"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/providertest"
)

// Provider is a provider under test, with what the tests look at of
// its host side.
type Provider interface {
	provider.Provider
	// Net is the provider's network manager.
	Net() *netns.Manager
	// StateDir is the provider's state directory.
	StateDir() string
	Close() error
}

// Config is what a provider under test is opened with.
type Config struct {
	// Pool is the provider's warm pool: zero its default, -1 none.
	Pool int
	// Network is its Config.Network.
	Network hostnet.NetworkConfig
	// StateDir, if set, is the state directory of a provider opened
	// before (a provider opened after a crash, or again); zero means a
	// fresh one.
	StateDir string
}

// Harness is how the tests open and harm a provider.
type Harness struct {
	// Open opens a provider as c says, closed (and its sandboxes
	// destroyed) when the test ends.
	Open func(t testing.TB, c Config) Provider
	// Kill kills sb from outside (its daemon, container or gVisor
	// sandbox process, as a crash or the out-of-memory killer would)
	// and returns once it is dead.
	Kill func(t *testing.T, p Provider, sb provider.Sandbox)
	// Residue, if set, counts what the provider holds of sandboxes (their
	// containers, warm ones too): a sandbox whose creation failed must
	// leave none.
	Residue func(t *testing.T, p Provider) int
	// AttachLater says that UpdateNetwork gives a network to a sandbox
	// started without one; without it, that is refused
	// (errdefs.ErrUnsupported: gVisor takes its interfaces as it
	// starts).
	AttachLater bool
}

// Port is where the tests' egress proxy listens, on nettest.HostAddr
// in the topology's uplink.
const Port = 15001

// maxProxyConns is the bound the Network group's proxy sets on one
// sandbox's connections: small, so that exhausting it is quick.
const maxProxyConns = 16

// Env is a provider opened over a topology of its own.
type Env struct {
	TP    *nettest.Topology
	Proxy *egress.Proxy
	P     Provider
	h     Harness
	n     hostnet.NetworkConfig // P's
}

// Open opens a provider over a fresh topology, with a real egress
// proxy in its uplink; mod changes the network configuration, pmod the
// proxy's.
func (h Harness) open(t testing.TB, pool int, mod func(*hostnet.NetworkConfig), pmod func(*egress.Config)) *Env {
	t.Helper()
	tp := nettest.New(t)
	proxy, addr := egresstest.Start(t, tp, Port, pmod)
	n := hostnet.NetworkConfig{ProxyAddr: addr, Uplink: tp.Uplink, Resolver: tp.Resolver(), Egress: proxy}
	if mod != nil {
		mod(&n)
	}
	return &Env{TP: tp, Proxy: proxy, P: h.Open(t, Config{Pool: pool, Network: n}), h: h, n: n}
}

// Run runs every test against the harness's provider.
func Run(t *testing.T, h Harness) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"Conformance", testConformance},
		{"NamesGoToTheProxy", testNamesGoToTheProxy},
		{"DestroyAndKill", testDestroyAndKill},
		{"PoolFull", testPoolFull},
		{"Update", testUpdate},
		{"AfterRestart", testAfterRestart},
		{"CredentialPerSandbox", testCredentialPerSandbox},
		{"Trust", testTrust},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, h) })
	}
}

// Targets are the topology's hosts as providertest's Network group
// takes them.
func Targets(tp *nettest.Topology) *providertest.NetworkTargets {
	hosts := tp.Hosts
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
		HostCA: tp.CAPEM, TLSPort: nettest.TLSPort, OtherPort: nettest.OtherPort,
		Hits: func(name string, port uint16) int {
			n := 0
			for _, h := range hosts[name].Hits() {
				if h.Port == int(port) {
					n++
				}
			}
			return n
		},
		Requests: func(name string) []providertest.HostRequest {
			var out []providertest.HostRequest
			for _, r := range hosts[name].Requests() {
				out = append(out, providertest.HostRequest{TLS: r.TLS, Host: r.Host, Header: r.Header})
			}
			return out
		},
		Rebind: func(name string, addr netip.Addr) func() {
			tp.DNS.Set(name, addr)
			return func() { tp.DNS.Set(name, nettest.PyPIAddr) }
		},
	}
}

// testConformance holds the provider's sandboxes to providertest's
// Network group: allow lists by address and by name, tried as an
// attacker would, open without private, metadata or host ranges, none,
// live updates, and a credential for git.example over HTTP and HTTPS,
// its proxy's authority trusted; warm sandboxes among them.
func testConformance(t *testing.T, h Harness) {
	secret := "Bearer " + RandHex(t)
	var tp *nettest.Topology
	e := h.open(t, 0, func(n *hostnet.NetworkConfig) {
		n.Credentials = func(string, provider.Network) []hostnet.Credential {
			return []hostnet.Credential{{Host: "git.example", Header: "Authorization", Value: secret}}
		}
		n.ProxyCA = n.Egress.(*egress.Proxy).CACertPEM()
	}, func(c *egress.Config) { c.MaxConnsPerSandbox = maxProxyConns })
	tp = e.TP
	// A service of "the host", which no sandbox may reach.
	ln, err := nettest.Listen(tp.UplinkNS, "tcp4", netip.AddrPortFrom(nettest.HostAddr, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	targets := Targets(tp)
	targets.MaxProxyConns = maxProxyConns
	targets.Credential = &providertest.NetworkCredential{Name: "git.example", Header: "Authorization", Value: secret}
	providertest.RunNetwork(t, providertest.Harness{
		Open:    func(t *testing.T) provider.Provider { return e.P },
		Network: targets,
	})
	if err := tp.Contained(netns.DefaultPool); err != nil {
		t.Fatal(err)
	}
	// The name-based cases were refused by the proxy, as it decides,
	// and not only by the kernel's rules.
	if s := e.Proxy.Stats(); s.Refused[egress.ReasonAddrForbidden] == 0 || s.Refused[egress.ReasonHostNotAllowed] == 0 {
		t.Errorf("proxy refusals = %v, want forbidden addresses and hosts not allowed", s.Refused)
	}
	e.noSecret(t, secret)
}

// testNamesGoToTheProxy resolves an allowed name inside a sandbox,
// through its resolv.conf and the DNS stub, and connects: the
// connection reaches the real egress proxy, aimed at the service
// address, which relays it to the name's server. An unlisted name does
// not resolve, and the sandbox cannot rewrite its resolv.conf.
func testNamesGoToTheProxy(t *testing.T, h Harness) {
	e := h.open(t, -1, nil, nil)
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "names", Network: provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}})
	out := sandboxtest.Sh(t, sb, `cat /etc/resolv.conf; /usr/bin/python3 -c '
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
	service := e.P.Net().ServiceAddr().String()
	for _, want := range []string{"nameserver " + service, "pypi.org is " + service, "evil.example refused", "\npypi.org"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox printed %q, want %q in it", out, want)
		}
	}
	// The real proxy took it, knowing the sandbox (netns registered it),
	// and relayed it to pypi.org's server by name, from the uplink.
	if st := e.Proxy.Stats(); st.Accepted != 1 {
		t.Errorf("the proxy accepted %d connections, want 1 (refused: %v)", st.Accepted, st.Refused)
	}
	if n := len(e.TP.Hosts["pypi.org"].Requests()); n != 1 {
		t.Errorf("pypi.org got %d requests, want 1", n)
	}
	for _, hit := range e.TP.Hosts["pypi.org"].Hits() {
		if hit.From != nettest.HostAddr {
			t.Errorf("pypi.org saw a connection from %s, not the host's uplink", hit.From)
		}
	}
	if code := run(t, sb, "sh", "-c", "echo nameserver 203.0.113.53 > /etc/resolv.conf"); code == 0 {
		t.Error("a sandbox rewrote its resolv.conf")
	}
}

func run(t *testing.T, sb provider.Sandbox, argv ...string) int {
	t.Helper()
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode
}

// testDestroyAndKill checks that Destroy leaves nothing of a sandbox's
// network; that a sandbox killed from outside loses its veth with its
// namespace, keeps its table and slot until the next sweep removes
// them, and is then destroyed without complaint; and that a provider
// opened after a crash sweeps as it opens.
func testDestroyAndKill(t *testing.T, h Harness) {
	e := h.open(t, -1, nil, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	a := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-destroyed", Network: policy})
	b := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-killed", Network: policy})
	c := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-none"})
	e.left(t, "net-none")
	e.kept(t, "net-killed")
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-destroyed")
	e.kill(t, b)
	left, err := e.P.Net().Leftovers("net-killed")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 3 {
		t.Errorf("a killed sandbox's network holds %q, want its table, record and slot alone", left)
	}
	if err := e.P.(interface{ SweepNetworks(context.Context) error }).SweepNetworks(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-killed")
	if err := b.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	d := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-crashed", Network: policy})
	e.kill(t, d)
	n := e.config()
	h.Open(t, Config{Pool: -1, Network: n, StateDir: e.P.StateDir()})
	e.left(t, "net-crashed")
	// The sandbox of none was left alone.
	sandboxtest.Sh(t, c, "true")
}

// config is the network configuration e's provider was opened with.
func (e *Env) config() hostnet.NetworkConfig { return e.n }

// kill kills sb and waits until its namespace's veth is gone.
func (e *Env) kill(t *testing.T, sb provider.Sandbox) {
	t.Helper()
	e.h.Kill(t, e.P, sb)
	testkit.Eventually(t, "veth gone", 10*time.Second, func() bool {
		left, _ := e.P.Net().Leftovers(sb.ID())
		return !strings.Contains(strings.Join(left, " "), "veth")
	})
}

// left fails the test if anything of id's network is left.
func (e *Env) left(t *testing.T, id string) {
	t.Helper()
	left, err := e.P.Net().Leftovers(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left of %s's network: %s", id, strings.Join(left, ", "))
	}
}

// kept fails the test unless id's network is whole: veth, table,
// record, slot.
func (e *Env) kept(t *testing.T, id string) {
	t.Helper()
	left, err := e.P.Net().Leftovers(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 4 {
		t.Errorf("%s's network holds %q, want its veth, table, record and slot", id, left)
	}
}

// testPoolFull fills the address pool: the next sandbox of a network
// is refused (ErrQuota) and nothing of it is left; a sandbox of none is
// still made, and once a slot is free a network sandbox is again.
func testPoolFull(t *testing.T, h Harness) {
	e := h.open(t, -1, func(n *hostnet.NetworkConfig) {
		n.Pool = netip.MustParsePrefix("100.96.0.0/28") // the smallest: three slots
	}, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	var a provider.Sandbox
	for i := range 3 {
		a = sandboxtest.Create(t, e.P, provider.Spec{ID: "first" + strconv.Itoa(i), Network: policy})
	}
	_, err := e.P.Create(t.Context(), provider.Spec{ID: "second", Network: policy})
	if !errors.Is(err, errdefs.ErrQuota) {
		t.Fatalf("a sandbox past the pool: %v, want quota", err)
	}
	e.left(t, "second")
	if _, err := e.P.Get(t.Context(), "second"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a sandbox whose network failed exists: %v", err)
	}
	if h.Residue != nil {
		if n := h.Residue(t, e.P); n != 3 {
			t.Errorf("containers left: %d, want the first sandboxes' alone", n)
		}
	}
	sandboxtest.Create(t, e.P, provider.Spec{ID: "closed"})
	if err := a.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	sandboxtest.Create(t, e.P, provider.Spec{ID: "second", Network: policy})
}

// reachProbe says whether pypi.org's address answers on port 80.
const reachProbe = `/usr/bin/python3 -c '
import socket
try:
    socket.create_connection(("203.0.113.10", 80), timeout=2).close()
    print("reached")
except OSError as e:
    print("unreached", type(e).__name__)
'`

// testUpdate changes running sandboxes' networks: one of a network has
// it taken away, which it survives, and an allow list of nothing is
// refused; one started without a network (from a warm daemon) is given
// one and has it taken away again, or, where the provider cannot
// (Harness.AttachLater), is refused and left as it was.
func testUpdate(t *testing.T, h Harness) {
	e := h.open(t, 1, nil, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{nettest.PyPIAddr.String()}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-update", Network: policy})
	if out := sandboxtest.Sh(t, sb, reachProbe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
		t.Fatalf("a sandbox whose allow list names the host: %q", out)
	}
	u := sb.(provider.NetworkUpdater)
	if err := u.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-update")
	if out := sandboxtest.Sh(t, sb, reachProbe); !strings.Contains(out, "unreached") {
		t.Errorf("a sandbox whose network UpdateNetwork took away: %q", out)
	}
	// The veth goes with its link (gVisor's netstack keeps its own
	// interface, dead, for it takes interfaces only as it starts).
	if out := python(t, sb, "import socket; print(*sorted(n for _, n in socket.if_nameindex()))"); h.AttachLater && strings.TrimSpace(out) != "lo" {
		t.Errorf("interfaces once the network is taken away: %q", out)
	}
	if err := u.UpdateNetwork(t.Context(), provider.Network{Mode: provider.NetworkAllow}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("UpdateNetwork with an allow list of nothing: %v, want bad input", err)
	}
	// Given back: attached again, or refused and left as it was.
	err := u.UpdateNetwork(t.Context(), policy)
	switch {
	case h.AttachLater && err != nil:
		t.Errorf("UpdateNetwork giving back a network: %v", err)
	case h.AttachLater:
		if out := sandboxtest.Sh(t, sb, reachProbe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
			t.Errorf("a sandbox given back its network: %q", out)
		}
		if err := u.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
			t.Fatal(err)
		}
	case !errors.Is(err, errdefs.ErrUnsupported):
		t.Errorf("UpdateNetwork giving back a network: %v, want unsupported", err)
	}
	e.left(t, "net-update")
	sandboxtest.Sh(t, sb, "true")

	sandboxtest.Create(t, e.P, provider.Spec{ID: "fill"}) // the warm pool fills from a creation
	later := sandboxtest.Create(t, e.P, provider.Spec{ID: "net-later"})
	lu := later.(provider.NetworkUpdater)
	if out := sandboxtest.Sh(t, later, reachProbe); !strings.Contains(out, "unreached") {
		t.Fatalf("a sandbox without a network: %q", out)
	}
	err = lu.UpdateNetwork(t.Context(), policy)
	if !h.AttachLater {
		if !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("UpdateNetwork giving a network to a sandbox started without: %v, want unsupported", err)
		}
		e.left(t, "net-later")
		if err := lu.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
			t.Errorf("UpdateNetwork to none on a sandbox of none: %v", err)
		}
		sandboxtest.Sh(t, later, "true")
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if out := sandboxtest.Sh(t, later, reachProbe); !strings.Contains(out, "reached") || strings.Contains(out, "unreached") {
		t.Errorf("a sandbox given a network by UpdateNetwork: %q", out)
	}
	if err := lu.UpdateNetwork(t.Context(), provider.Network{}); err != nil {
		t.Fatal(err)
	}
	e.left(t, "net-later")
	if out := sandboxtest.Sh(t, later, reachProbe); !strings.Contains(out, "unreached") {
		t.Errorf("a sandbox whose network UpdateNetwork took away: %q", out)
	}
}

// fetch runs http(s)://pypi.org/ fetches in sb, printing "<scheme> ok
// <body>" or "<scheme> err <exception>"; https verifies against the
// test CA alone (argv[1]).
const fetch = `
import ssl, sys, urllib.request
open("/tmp/testca.pem", "w").write(sys.argv[1])
for scheme in sys.argv[2:]:
    try:
        ctx = ssl.create_default_context(cafile="/tmp/testca.pem") if scheme == "https" else None
        print(scheme, "ok", urllib.request.urlopen(scheme + "://pypi.org/", timeout=5, context=ctx).read().decode().strip())
    except Exception as e:
        print(scheme, "err", type(e).__name__)
`

func (e *Env) fetch(t *testing.T, sb provider.Sandbox, schemes ...string) string {
	t.Helper()
	return strings.TrimSpace(python(t, sb, fetch, append([]string{string(e.TP.CAPEM)}, schemes...)...))
}

// python runs program in sb with args, failing the test unless it
// exits 0, and returns what it printed.
func python(t *testing.T, sb provider.Sandbox, program string, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: append([]string{"/usr/bin/python3", "-c", program}, args...), Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("python3: exit %d, %v; stderr: %s", res.ExitCode, err, errOut.String())
	}
	return out.String()
}

// testAfterRestart: the host process restarts, and with it the proxy,
// which knows no sandbox; the sandboxes and their links live on. The
// provider opened anew registers them with the new proxy, and their
// names work again.
func testAfterRestart(t *testing.T, h Harness) {
	e := h.open(t, -1, nil, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-restart", Network: policy})
	if got := e.fetch(t, sb, "http"); got != "http ok pypi.org" {
		t.Fatalf("before: %q", got)
	}
	e.Proxy.Close()
	fresh, _ := egresstest.Start(t, e.TP, Port, nil)
	if got := e.fetch(t, sb, "http"); strings.HasPrefix(got, "http ok") {
		t.Fatalf("a proxy that knows no sandbox relayed: %q", got)
	}
	n := e.config()
	n.Egress = fresh
	h.Open(t, Config{Pool: -1, Network: n, StateDir: e.P.StateDir()})
	if got := e.fetch(t, sb, "http"); got != "http ok pypi.org" {
		t.Errorf("after the provider opened again: %q", got)
	}
	if s := fresh.Stats(); s.Refused[egress.ReasonUnknownSource] == 0 {
		t.Errorf("the fresh proxy's refusals = %v, want the unknown source", s.Refused)
	}
}

// testCredentialPerSandbox: a credential the host gives one sandbox is
// added on its way to pypi.org, on the port it names alone (HTTPS to
// pypi.org stays end to end), and never to another sandbox's; the
// sandbox's environment, its files and the provider's state hold no
// trace of it.
func testCredentialPerSandbox(t *testing.T, h Harness) {
	secret := "Bearer " + RandHex(t)
	e := h.open(t, -1, func(n *hostnet.NetworkConfig) {
		n.Credentials = func(id string, _ provider.Network) []hostnet.Credential {
			if id != "egress-cred" {
				return nil
			}
			return []hostnet.Credential{{Host: "pypi.org:80", Header: "Authorization", Value: secret}}
		}
	}, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-cred", Network: policy})
	other := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-nocred", Network: policy})
	for _, s := range []provider.Sandbox{sb, other} {
		if got := e.fetch(t, s, "http", "https"); got != "http ok pypi.org\nhttps ok pypi.org" {
			t.Fatalf("fetch: %q", got)
		}
	}
	var with, without int
	for _, r := range e.TP.Hosts["pypi.org"].Requests() {
		switch a := r.Header.Get("Authorization"); {
		case r.TLS && a != "":
			t.Error("the credential went over HTTPS, which it does not apply to")
		case r.TLS:
		case a == secret:
			with++
		case a == "":
			without++
		default:
			t.Errorf("pypi.org got Authorization %q", a)
		}
	}
	if with != 1 || without != 1 {
		t.Errorf("HTTP requests with the credential %d, without %d; want 1 and 1", with, without)
	}
	if out := python(t, sb, hexRuns); strings.Contains(out, secret[len("Bearer "):]) || !strings.Contains(out, "files ") {
		t.Errorf("the sandbox's hex runs: %q", out)
	}
	e.noSecret(t, secret)
}

// noSecret fails the test if any file the provider keeps (its records,
// its network's state; the first MiB of each file under its state
// directory but its image cache) holds the secret.
func (e *Env) noSecret(t *testing.T, secret string) {
	t.Helper()
	read := 0
	err := filepath.WalkDir(e.P.StateDir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a sandbox's directory going as its walked
		}
		if d.IsDir() && d.Name() == ".images" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		b := make([]byte, 1<<20)
		n, _ := f.Read(b)
		read++
		if strings.Contains(string(b[:n]), secret) {
			t.Errorf("%s holds the credential", path)
		}
		return nil
	})
	if err != nil || read == 0 {
		t.Errorf("read %d files of the state directory: %v", read, err)
	}
}

// trustProbe prints, for https://pypi.org/ fetched with Python's default
// context (which reads SSL_CERT_FILE), what came back and who issued the
// certificate; for evil.example, allowed and without a credential, who
// issued its certificate and whether the test CA alone verifies it; and
// the CA variables the sandbox's commands get.
const trustProbe = `
import os, socket, ssl, sys, urllib.request
open("/tmp/testca.pem", "w").write(sys.argv[1])
def issuer(host, ctx):
    s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=5), server_hostname=host)
    try:
        return dict(x[0] for x in s.getpeercert()["issuer"])["commonName"]
    finally:
        s.close()
def run(name, f):
    try:
        print(name, "ok", f())
    except Exception as e:
        print(name, "err", type(e).__name__)
run("pypi_body", lambda: urllib.request.urlopen("https://pypi.org/", timeout=5).read().decode().strip())
run("pypi_issuer", lambda: issuer("pypi.org", ssl.create_default_context()))
run("pypi_testca", lambda: issuer("pypi.org", ssl.create_default_context(cafile="/tmp/testca.pem")))
run("evil_issuer", lambda: issuer("evil.example", ssl.create_default_context()))
run("evil_testca", lambda: issuer("evil.example", ssl.create_default_context(cafile="/tmp/testca.pem")))
for k in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"]:
    print(k, "ok", os.environ.get(k, "-"))
for d, _, fs in os.walk("/berth"):
    print("trust_files", "ok", len(fs))
`

// testTrust: with the proxy's authority given to its sandboxes, a
// credential reaches pypi.org over HTTPS, from a client that verifies
// with its default trust; evil.example, allowed without a credential,
// is still relayed untouched and its own certificate verified; the
// bundle is the root's system bundle and the authority, which the
// sandbox cannot change; a TLS client the sandbox's user configures
// keeps its setting.
func testTrust(t *testing.T, h Harness) {
	secret := "Bearer " + RandHex(t)
	var ca []byte
	e := h.open(t, -1, func(n *hostnet.NetworkConfig) {
		n.Credentials = func(string, provider.Network) []hostnet.Credential {
			return []hostnet.Credential{{Host: "pypi.org:443", Header: "Authorization", Value: secret}}
		}
		ca = n.Egress.(*egress.Proxy).CACertPEM()
		n.ProxyCA = ca
	}, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org", "evil.example"}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-https", Network: policy, Env: map[string]string{"GIT_SSL_CAINFO": "/workspace/mine.pem"}})
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(python(t, sb, trustProbe, string(e.TP.CAPEM))), "\n") {
		name, rest, _ := strings.Cut(line, " ")
		got[name] = rest
	}
	t.Logf("from inside the sandbox: %q", got)
	for name, want := range map[string]string{
		"pypi_body":   "ok pypi.org",
		"pypi_issuer": "ok berth egress proxy", // terminated, to add the credential
		"pypi_testca": "err SSLCertVerificationError",
		// Relayed: the host's own certificate, which the test CA alone
		// verifies and the default trust (system and proxy) does not.
		"evil_issuer":   "err SSLCertVerificationError",
		"evil_testca":   "ok berth nettest CA",
		"SSL_CERT_FILE": "ok /berth/ca-bundle.pem", "REQUESTS_CA_BUNDLE": "ok /berth/ca-bundle.pem",
		"PIP_CERT": "ok /berth/ca-bundle.pem", "CURL_CA_BUNDLE": "ok /berth/ca-bundle.pem",
		"NODE_EXTRA_CA_CERTS": "ok /berth/proxy-ca.pem", "GIT_SSL_CAINFO": "ok /workspace/mine.pem",
		"trust_files": "ok 2",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	var with int
	for _, r := range e.TP.Hosts["pypi.org"].Requests() {
		switch a := r.Header.Get("Authorization"); {
		case r.TLS && a == secret:
			with++
		case a != "":
			t.Errorf("pypi.org got Authorization %q over TLS %v", a, r.TLS)
		}
	}
	if with != 1 {
		t.Errorf("HTTPS requests with the credential: %d, want 1", with)
	}
	// The bundle is the root's system bundle (the host's, for a root
	// made of the host's files, or none), then the proxy's authority,
	// and the sandbox's user cannot change it.
	bundle := sandboxtest.Sh(t, sb, "cat /berth/ca-bundle.pem")
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if before, ok := strings.CutSuffix(bundle, string(ca)); !ok || before != "" && before != string(system) && before != string(system)+"\n" {
		t.Errorf("the bundle (%d bytes) is not the root's system bundle (the host's is %d bytes) and the proxy's authority", len(bundle), len(system))
	}
	if r := run(t, sb, "/bin/sh", "-c", "echo x >> /berth/ca-bundle.pem"); r == 0 {
		t.Error("the sandbox wrote to its bundle")
	}
	if r := run(t, sb, "/bin/sh", "-c", "echo x > /berth/mine.pem"); r == 0 {
		t.Error("the sandbox wrote into /berth")
	}
	if out := python(t, sb, hexRuns); strings.Contains(out, secret[len("Bearer "):]) || !strings.Contains(out, "files ") {
		t.Errorf("the sandbox's hex runs: %q", out)
	}
}

// hexRuns prints the runs of 32 hex digits in the sandbox's environment
// and in the files it can read under /etc, /tmp, /home, /root, /berth
// and its workspace (the first MiB of each), then how many files it
// read.
const hexRuns = `
import os, re
pat = re.compile(rb"[0-9a-f]{32}")
found = set(pat.findall("\n".join(k + "=" + v for k, v in os.environ.items()).encode()))
n = 0
for top in ["/etc", "/tmp", "/home", "/root", "/berth", "."]:
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                if not os.path.isfile(p) or os.path.islink(p):
                    continue
                with open(p, "rb") as fh:
                    found.update(pat.findall(fh.read(1 << 20)))
                n += 1
            except OSError:
                pass
for h in sorted(found):
    print(h.decode())
print("files", n)
`

// KillProcess is a Harness.Kill for providers whose sandbox is one
// host process (linux's daemon, gVisor's sandbox process): it kills pid
// and waits until alive says it is gone.
func KillProcess(t *testing.T, pid int, alive func() bool) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "sandbox process gone", 10*time.Second, func() bool { return !alive() })
}

// RandHex is 32 random hex digits: a secret's shape, which the
// sandboxes look for.
func RandHex(t testing.TB) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

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
