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
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

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
