package netns

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
)

// refuseWithin is how long a dial that the rules drop is given before
// it counts as refused: a dropped SYN never arrives, however long.
const refuseWithin = time.Second

// reachWithin is how long a dial the rules let through is given: a SYN
// lost while a sandbox's link comes up is sent again after a second, and
// a loaded machine adds to that.
const reachWithin = 10 * time.Second

type env struct {
	tp    *nettest.Topology
	m     *Manager
	proxy *nettest.Proxy
	state string
}

func newEnv(t *testing.T, mod func(*Config)) *env {
	tp := nettest.New(t)
	proxy := tp.StartProxy(15001)
	e := &env{tp: tp, proxy: proxy, state: t.TempDir()}
	cfg := Config{Uplink: tp.Uplink, ProxyAddr: proxy.Addr, StateDir: e.state, Resolver: tp.Resolver()}
	if mod != nil {
		mod(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	e.m = m
	return e
}

// sandbox makes a sandbox's namespace and attaches it.
func (e *env) sandbox(t *testing.T, id string, policy provider.Network) (netns.NsHandle, *Link) {
	t.Helper()
	path, ns := e.tp.Namespace(id)
	l, err := e.m.Attach(t.Context(), id, path, 0, policy)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if err := e.tp.Contained(e.m.cfg.Pool); err != nil {
		t.Fatal(err)
	}
	return ns, l
}

// get sends an HTTP GET to addr from ns, which the rules should let
// through, and returns the answer.
func get(ns netns.NsHandle, addr netip.Addr, port uint16) (string, error) {
	return getWithin(reachWithin, ns, addr, port)
}

// getWithin is get, giving the dial within.
func getWithin(within time.Duration, ns netns.NsHandle, addr netip.Addr, port uint16) (string, error) {
	c, err := nettest.Dial(ns, "tcp4", netip.AddrPortFrom(addr, port).String(), within)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n")
	b, err := io.ReadAll(c)
	return string(b), err
}

func udp(ns netns.NsHandle, addr netip.Addr, port uint16) (string, error) {
	c, err := nettest.Dial(ns, "udp4", netip.AddrPortFrom(addr, port).String(), refuseWithin)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(refuseWithin))
	if _, err := c.Write([]byte("hello")); err != nil {
		return "", err
	}
	b := make([]byte, 64)
	n, err := c.Read(b)
	return string(b[:n]), err
}

func noHits(t *testing.T, h *nettest.Host) {
	t.Helper()
	if hits := h.Hits(); len(hits) != 0 {
		t.Errorf("%s was reached: %v", h.Name, hits)
	}
}

func (e *env) proxied(t *testing.T, want netip.AddrPort) {
	t.Helper()
	select {
	case got := <-e.proxy.Conns:
		if got != want {
			t.Errorf("proxy got a connection for %s, want %s", got, want)
		}
	default:
		t.Errorf("no connection for %s reached the proxy", want)
	}
}

var allowPolicy = provider.Network{Mode: provider.NetworkAllow,
	Hosts: []string{"pypi.org", "*.pythonhosted.org", "git.example.com:22"},
	CIDRs: []string{nettest.PyPIAddr.String()},
	Ports: []uint16{80, 443, nettest.UDPPort}}

func TestAllow(t *testing.T) {
	e := newEnv(t, nil)
	hosts := e.tp.Hosts
	// A service of the host's own, on its address in the uplink.
	hostSvc, err := nettest.Listen(e.tp.UplinkNS, "tcp4", netip.AddrPortFrom(nettest.HostAddr, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer hostSvc.Close()
	ns, l := e.sandbox(t, "sb-allow", allowPolicy)

	t.Run("CIDR-listed host works, masqueraded", func(t *testing.T) {
		for _, port := range []uint16{nettest.HTTPPort} {
			if b, err := get(ns, nettest.PyPIAddr, port); err != nil || !strings.Contains(b, "pypi.org") {
				t.Fatalf("GET pypi.org:%d = %q, %v", port, b, err)
			}
		}
		if b, err := udp(ns, nettest.PyPIAddr, nettest.UDPPort); err != nil || b != "pypi.org\n" {
			t.Fatalf("UDP to pypi.org = %q, %v", b, err)
		}
		for _, h := range hosts["pypi.org"].Hits() {
			if h.From != nettest.HostAddr {
				t.Errorf("pypi.org saw %s, want the uplink's address", h.From)
			}
		}
	})
	t.Run("TCP to an allowed port of an unlisted address goes to the proxy", func(t *testing.T) {
		for _, h := range []*nettest.Host{hosts["evil.example"], hosts["metadata"], hosts["private"]} {
			b, err := get(ns, h.Addr, nettest.HTTPPort)
			if err != nil || b != "proxy\n" {
				t.Fatalf("GET %s = %q, %v; want the proxy's answer", h.Name, b, err)
			}
			e.proxied(t, netip.AddrPortFrom(h.Addr, nettest.HTTPPort))
		}
		// A port only a host rule names goes there too.
		if b, err := get(ns, nettest.EvilAddr, 22); err != nil || b != "proxy\n" {
			t.Fatalf("port 22 = %q, %v", b, err)
		}
		e.proxied(t, netip.AddrPortFrom(nettest.EvilAddr, 22))
	})
	t.Run("a port no rule allows is refused", func(t *testing.T) {
		for _, a := range []netip.Addr{nettest.EvilAddr, nettest.MetadataAddr, nettest.PrivateAddr, nettest.PyPIAddr} {
			if _, err := getWithin(refuseWithin, ns, a, 8443); err == nil {
				t.Errorf("reached %s:8443", a)
			}
		}
	})
	t.Run("the host's own address is refused", func(t *testing.T) {
		if _, err := getWithin(refuseWithin, ns, nettest.HostAddr, 8080); err == nil {
			t.Error("reached the host's service")
		}
		if _, err := getWithin(refuseWithin, ns, l.Gateway, 8080); err == nil {
			t.Error("reached the host's service through the gateway address")
		}
	})
	t.Run("UDP to unlisted addresses is refused", func(t *testing.T) {
		for _, a := range []netip.Addr{nettest.EvilAddr, nettest.MetadataAddr, nettest.PrivateAddr, nettest.HostAddr} {
			if b, err := udp(ns, a, nettest.UDPPort); err == nil {
				t.Errorf("UDP to %s answered %q", a, b)
			}
		}
	})
	t.Run("raw sockets go nowhere", func(t *testing.T) {
		rawNowhere(t, e, ns)
	})
	t.Run("source addresses cannot be spoofed", func(t *testing.T) {
		nl, _ := netlink.NewHandleAt(ns)
		defer nl.Close()
		eth, _ := nl.LinkByName(Interface)
		other, _ := netip.ParsePrefix("100.96.0.10/30")
		if err := nl.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(other)}); err != nil {
			t.Fatal(err)
		}
		defer nl.AddrDel(eth, &netlink.Addr{IPNet: ipnet(other)})
		err := nettest.In(ns, func() error {
			d := net.Dialer{Timeout: refuseWithin, LocalAddr: &net.TCPAddr{IP: other.Addr().AsSlice()}}
			c, err := d.Dial("tcp4", netip.AddrPortFrom(nettest.PyPIAddr, 80).String())
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			t.Error("a connection from a spoofed source went through")
		}
	})
	noHits(t, hosts["evil.example"])
	noHits(t, hosts["metadata"])
	noHits(t, hosts["private"])

	t.Run("DNS answers allowed names with the service address", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			want int
		}{{"pypi.org", dns.RcodeSuccess}, {"files.pythonhosted.org", dns.RcodeSuccess}, {"git.example.com", dns.RcodeSuccess},
			{"evil.example", dns.RcodeNameError}, {"pythonhosted.org", dns.RcodeNameError}} {
			// Sent to an address of the outside: port 53 goes to the stub whatever the address.
			r := query(t, ns, nettest.EvilAddr, tc.name, dns.TypeA)
			if r.Rcode != tc.want {
				t.Errorf("%s: rcode %d, want %d", tc.name, r.Rcode, tc.want)
			}
			if tc.want == dns.RcodeSuccess && (len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != e.m.ServiceAddr().String()) {
				t.Errorf("%s: answer %v, want %s", tc.name, r.Answer, e.m.ServiceAddr())
			}
		}
		if r := query(t, ns, e.m.ServiceAddr(), "pypi.org", dns.TypeAAAA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("AAAA: %v", r)
		}
		if b, err := get(ns, e.m.ServiceAddr(), 443); err != nil || b != "proxy\n" {
			t.Fatalf("TCP to the service address = %q, %v", b, err)
		}
		e.proxied(t, netip.AddrPortFrom(e.m.ServiceAddr(), 443))
	})

	t.Run("Update changes the rules live", func(t *testing.T) {
		p := allowPolicy
		p.CIDRs = []string{nettest.PrivateAddr.String()}
		p.Ports = []uint16{80}
		if err := e.m.Update(t.Context(), "sb-allow", p); err != nil {
			t.Fatal(err)
		}
		if b, err := get(ns, nettest.PrivateAddr, 80); err != nil || !strings.Contains(b, "private") {
			t.Fatalf("private host after Update = %q, %v", b, err)
		}
		if _, err := udp(ns, nettest.PyPIAddr, nettest.UDPPort); err == nil {
			t.Error("pypi.org's UDP still reached after Update removed it")
		}
		if err := e.m.Update(t.Context(), "sb-allow", provider.Network{}); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("Update to none = %v, want ErrBadInput", err)
		}
		if err := e.m.Update(t.Context(), "nope", p); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Update of an unknown sandbox = %v, want ErrNotFound", err)
		}
	})

	e.detach(t, ns, "sb-allow")
}

// rawNowhere sends a raw IP packet and an ICMP echo to a CIDR-listed
// host, then a UDP datagram that is let through: the host sees the
// datagram alone.
func rawNowhere(t *testing.T, e *env, ns netns.NsHandle) {
	pypi := e.tp.Hosts["pypi.org"]
	var rfd int
	if err := nettest.In(pypi.NS, func() (err error) {
		rfd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, 253)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	err := nettest.In(ns, func() error {
		for _, proto := range []int{253, unix.IPPROTO_ICMP} {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, proto)
			if err != nil {
				return err
			}
			msg := []byte{8, 0, 0xf7, 0xff, 0, 0, 0, 0} // an echo request
			err = unix.Sendto(fd, msg, 0, &unix.SockaddrInet4{Addr: nettest.PyPIAddr.As4()})
			unix.Close(fd)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := udp(ns, nettest.PyPIAddr, nettest.UDPPort); err != nil {
		t.Fatalf("UDP after the raw packets: %v", err)
	}
	if n, _, err := unix.Recvfrom(rfd, make([]byte, 64), 0); err == nil {
		t.Errorf("a raw packet of %d bytes reached pypi.org", n)
	}
}

func query(t *testing.T, ns netns.NsHandle, server netip.Addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	var r *dns.Msg
	err := nettest.In(ns, func() (err error) {
		c := &dns.Client{Timeout: 5 * time.Second}
		r, _, err = c.Exchange(q, netip.AddrPortFrom(server, 53).String())
		return err
	})
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	return r
}

// detach detaches id and checks that nothing of it is left.
func (e *env) detach(t *testing.T, ns netns.NsHandle, id string) {
	t.Helper()
	if err := e.m.Detach(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Detach(t.Context(), id); err != nil {
		t.Fatalf("second Detach: %v", err)
	}
	e.gone(t, id)
	if ns.IsOpen() {
		nl, _ := netlink.NewHandleAt(ns)
		defer nl.Close()
		if _, err := nl.LinkByName(Interface); err == nil {
			t.Errorf("the sandbox still has %s", Interface)
		}
	}
}

// gone checks that the uplink has no veth and no table of id, and
// StateDir no slot.
func (e *env) gone(t *testing.T, id string) {
	t.Helper()
	if _, err := e.m.nl.LinkByName(vethName(id)); err == nil {
		t.Errorf("veth of %s left", id)
	}
	c, _ := e.m.nft()
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == tableName(id) {
			t.Errorf("table %s left", tb.Name)
		}
	}
	if _, err := e.m.Link(id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("record of %s left: %v", id, err)
	}
	entries, _ := os.ReadDir(e.state)
	for _, en := range entries {
		b, _ := os.ReadFile(filepath.Join(e.state, en.Name()))
		if strings.Contains(string(b), `"`+id+`"`) || en.Name() == "id-"+id {
			t.Errorf("state file %s of %s left", en.Name(), id)
		}
	}
}

func TestOpen(t *testing.T) {
	e := newEnv(t, nil)
	ns, _ := e.sandbox(t, "sb-open", provider.Network{Mode: provider.NetworkOpen})
	if b, err := get(ns, nettest.PyPIAddr, 80); err != nil || !strings.Contains(b, "pypi.org") {
		t.Fatalf("GET pypi.org = %q, %v", b, err)
	}
	if b, err := udp(ns, nettest.EvilAddr, nettest.UDPPort); err != nil || b != "evil.example\n" {
		t.Fatalf("UDP to evil.example = %q, %v", b, err)
	}
	for _, a := range []netip.Addr{nettest.MetadataAddr, nettest.PrivateAddr, nettest.HostAddr, e.m.ServiceAddr()} {
		if _, err := getWithin(refuseWithin, ns, a, 80); err == nil {
			t.Errorf("an open sandbox reached %s", a)
		}
	}
	noHits(t, e.tp.Hosts["metadata"])
	noHits(t, e.tp.Hosts["private"])
	r := query(t, ns, e.m.ServiceAddr(), "pypi.org", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != nettest.PyPIAddr.String() {
		t.Fatalf("pypi.org resolved to %v", r.Answer)
	}
	// A name rebound to the metadata service resolves, and leads nowhere.
	e.tp.DNS.Set("pypi.org", nettest.MetadataAddr)
	r = query(t, ns, e.m.ServiceAddr(), "pypi.org", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != nettest.MetadataAddr.String() {
		t.Fatalf("rebound pypi.org resolved to %v", r.Answer)
	}
	if _, err := getWithin(refuseWithin, ns, nettest.MetadataAddr, 80); err == nil {
		t.Error("a rebound name led to the metadata service")
	}
	noHits(t, e.tp.Hosts["metadata"])
	rawNowhere(t, e, ns)
	e.detach(t, ns, "sb-open")
}

func TestConnectionLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxConns = 3 })
	ns, _ := e.sandbox(t, "sb-limit", allowPolicy)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 3 {
		c, err := nettest.Dial(ns, "tcp4", netip.AddrPortFrom(nettest.PyPIAddr, 80).String(), 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		held = append(held, c)
	}
	if c, err := nettest.Dial(ns, "tcp4", netip.AddrPortFrom(nettest.PyPIAddr, 80).String(), refuseWithin); err == nil {
		c.Close()
		t.Fatal("a 4th connection went through a limit of 3")
	}
}

func TestSweep(t *testing.T) {
	e := newEnv(t, nil)
	_, _ = e.sandbox(t, "sb-live", allowPolicy)
	deadPath, dead := e.tp.Namespace("sb-dead")
	if _, err := e.m.Attach(t.Context(), "sb-dead", deadPath, 0, allowPolicy); err != nil {
		t.Fatal(err)
	}
	_, _ = e.sandbox(t, "sb-gone", allowPolicy)
	// sb-dead's namespace dies with its sandbox: its veth goes with it,
	// its table and slot stay for Sweep.
	dead.Close()
	if err := netns.DeleteNamed(filepath.Base(deadPath)); err != nil {
		t.Fatal(err)
	}
	live := func(id string) bool { return id == "sb-live" }
	if err := e.m.Sweep(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "sb-dead")
	e.gone(t, "sb-gone")
	if _, err := e.m.Link("sb-live"); err != nil {
		t.Errorf("Sweep removed a live sandbox's link: %v", err)
	}
	// A table with no record, as a crash between the two leaves, goes too.
	c, _ := e.m.nft()
	c.AddTable(&nftables.Table{Name: tableName("orphan"), Family: nftables.TableFamilyINet})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Sweep(t.Context(), live); err != nil {
		t.Fatal(err)
	}
	e.gone(t, "orphan")
}

func TestAttachRefuses(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Pool = netip.MustParsePrefix("100.96.0.0/28") })
	path, _ := e.tp.Namespace("sb-x")
	for _, tc := range []struct {
		name   string
		id     string
		path   string
		policy provider.Network
		want   error
	}{
		{"mode none", "sb-x", path, provider.Network{}, errdefs.ErrBadInput},
		{"invalid policy", "sb-x", path, provider.Network{Mode: provider.NetworkAllow}, errdefs.ErrBadInput},
		{"bad id", "-x", path, allowPolicy, errdefs.ErrBadInput},
		{"no namespace", "sb-x", "/run/netns/does-not-exist", allowPolicy, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.m.Attach(t.Context(), tc.id, tc.path, 0, tc.policy); !errors.Is(err, tc.want) {
				t.Errorf("Attach = %v, want %v", err, tc.want)
			}
			e.gone(t, tc.id)
		})
	}
	if _, err := e.m.Attach(t.Context(), "sb-x", path, 0, allowPolicy); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.Attach(t.Context(), "sb-x", path, 0, allowPolicy); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Attach = %v, want ErrAlreadyExists", err)
	}
	// A /28 holds three sandboxes after the kept slot.
	for _, id := range []string{"sb-y", "sb-z"} {
		e.sandbox(t, id, allowPolicy)
	}
	p, _ := e.tp.Namespace("sb-full")
	if _, err := e.m.Attach(t.Context(), "sb-full", p, 0, allowPolicy); !errors.Is(err, errdefs.ErrQuota) {
		t.Errorf("Attach past the pool = %v, want ErrQuota", err)
	}
	e.gone(t, "sb-full")
	if _, err := New(Config{ProxyAddr: e.proxy.Addr, StateDir: t.TempDir(), Pool: netip.MustParsePrefix("fd00::/64")}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("New with an IPv6 pool = %v", err)
	}
	if _, err := New(Config{StateDir: t.TempDir()}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("New without a proxy = %v", err)
	}
}
