// Package nettest builds a small network of namespaces for tests of
// sandboxes' networks: an uplink namespace with no way off the machine,
// and test hosts behind it (a package index, an attacker's host, a
// git server, a cloud metadata service, a private-range host), each serving HTTP, TLS
// with a test CA, and UDP, and recording what reaches it; a DNS server
// that can be told to rebind a name; and, in the uplink itself, an
// address standing for the host's own.
//
// Every address is in the topology alone: New checks that the uplink
// has no default route and no route to anything outside the topology,
// and Contained checks it again whenever a test likes. Everything is
// removed in t.Cleanup, with netlink calls (no ip command).
package nettest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Addresses of the topology. They are documentation and special-use
// ranges; none leaves the machine, for no route leads off it.
var (
	HostAddr     = netip.MustParseAddr("198.51.100.1") // the uplink's own: "the host"
	PyPIAddr     = netip.MustParseAddr("203.0.113.10")
	EvilAddr     = netip.MustParseAddr("203.0.113.66")
	GitAddr      = netip.MustParseAddr("203.0.113.20") // a host a credential is for
	MetadataAddr = netip.MustParseAddr("169.254.169.254")
	PrivateAddr  = netip.MustParseAddr("10.200.0.5")
	DNSAddr      = netip.MustParseAddr("203.0.113.53")
)

// Ports every test host serves.
const (
	HTTPPort = 80
	TLSPort  = 443
	UDPPort  = 9999 // answers each datagram with the host's name
	// OtherPort serves HTTP as HTTPPort does: a port an allow list does
	// not name, whose hits say whether a sandbox got through to it.
	OtherPort = 8080
)

// Topology is the network New made.
type Topology struct {
	// Uplink is the path of the uplink namespace.
	Uplink   string
	UplinkNS netns.NsHandle
	// Hosts are the test hosts by name: "pypi.org", "evil.example",
	// "git.example", "metadata", "private".
	Hosts map[string]*Host
	DNS   *DNS
	// CA signed every test host's certificate.
	CA    *x509.CertPool
	CAPEM []byte

	t    testing.TB
	name string
}

// Host is one test host.
type Host struct {
	Name string
	Addr netip.Addr
	NS   netns.NsHandle

	mu       sync.Mutex
	hits     []Hit
	requests []Request
}

// Hit is one connection or datagram a host received.
type Hit struct {
	Proto string // "tcp" or "udp"
	Port  int
	From  netip.Addr
}

// Hits are what reached h so far.
func (h *Host) Hits() []Hit {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Hit(nil), h.hits...)
}

func (h *Host) hit(proto string, port int, from net.Addr) {
	ap, _ := netip.ParseAddrPort(from.String())
	h.mu.Lock()
	h.hits = append(h.hits, Hit{proto, port, ap.Addr()})
	h.mu.Unlock()
}

// New builds the topology. It needs root.
func New(t testing.TB) *Topology {
	t.Helper()
	name := fmt.Sprintf("bt%d-%x", os.Getpid(), randBytes(3))
	tp := &Topology{t: t, name: name, Hosts: map[string]*Host{}}
	tp.Uplink, tp.UplinkNS = tp.Namespace("up")
	ca, caKey, caPEM := newCA(t)
	tp.CAPEM = caPEM
	tp.CA = x509.NewCertPool()
	tp.CA.AddCert(ca)
	for _, h := range []struct {
		name string
		addr netip.Addr
	}{{"pypi.org", PyPIAddr}, {"evil.example", EvilAddr}, {"git.example", GitAddr}, {"metadata", MetadataAddr}, {"private", PrivateAddr}} {
		host := tp.addHost(h.name, h.addr)
		tp.serve(host, leafCert(t, ca, caKey, h.name, h.addr))
		tp.Hosts[h.name] = host
	}
	tp.DNS = tp.startDNS(tp.addHost("dns", DNSAddr))
	if err := tp.Contained(); err != nil {
		t.Fatal(err)
	}
	return tp
}

// Namespace makes a network namespace of the topology, with IPv6 off
// and lo up, removed at cleanup; it returns its path.
func (tp *Topology) Namespace(suffix string) (string, netns.NsHandle) {
	t := tp.t
	t.Helper()
	name := tp.name + "-" + suffix
	var ns netns.NsHandle
	err := run(func() error {
		var err error
		ns, err = netns.NewNamed(name)
		return err
	})
	if err != nil {
		t.Fatalf("new network namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := netns.DeleteNamed(name); err != nil && !os.IsNotExist(err) {
			t.Errorf("delete network namespace %s: %v", name, err)
		}
	})
	for _, f := range []string{"all", "default"} {
		if err := In(ns, func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+f+"/disable_ipv6", []byte("1"), 0)
		}); err != nil && !os.IsNotExist(err) {
			t.Fatalf("turn IPv6 off in %s: %v", name, err)
		}
	}
	nl := tp.handle(ns)
	lo, err := nl.LinkByName("lo")
	if err == nil {
		err = nl.LinkSetUp(lo)
	}
	if err != nil {
		t.Fatalf("lo up in %s: %v", name, err)
	}
	return "/run/netns/" + name, ns
}

func (tp *Topology) handle(ns netns.NsHandle) *netlink.Handle {
	tp.t.Helper()
	nl, err := netlink.NewHandleAt(ns)
	if err != nil {
		tp.t.Fatalf("netlink: %v", err)
	}
	tp.t.Cleanup(nl.Close)
	return nl
}

// addHost makes a host namespace at addr, joined to the uplink by a
// veth: the uplink end carries HostAddr and a route to addr alone.
func (tp *Topology) addHost(name string, addr netip.Addr) *Host {
	t := tp.t
	t.Helper()
	_, ns := tp.Namespace(fmt.Sprintf("h%d", len(tp.Hosts)+1))
	if name == "dns" {
		_, ns = tp.Namespace("dns")
	}
	up, hn := tp.handle(tp.UplinkNS), tp.handle(ns)
	la := netlink.NewLinkAttrs()
	la.Name = fmt.Sprintf("th%x", randBytes(4))
	v := &netlink.Veth{LinkAttrs: la, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns)}
	must(t, "veth for "+name, up.LinkAdd(v))
	upEnd, err := up.LinkByName(la.Name)
	must(t, "uplink end", err)
	must(t, "address uplink end", up.AddrAdd(upEnd, &netlink.Addr{IPNet: host32(HostAddr)}))
	must(t, "uplink end up", up.LinkSetUp(upEnd))
	must(t, "route to "+name, up.RouteAdd(&netlink.Route{LinkIndex: upEnd.Attrs().Index, Dst: host32(addr), Scope: netlink.SCOPE_LINK}))
	hostEnd, err := hn.LinkByName("eth0")
	must(t, "host end", err)
	must(t, "address host end", hn.AddrAdd(hostEnd, &netlink.Addr{IPNet: host32(addr)}))
	must(t, "host end up", hn.LinkSetUp(hostEnd))
	must(t, "route to the uplink", hn.RouteAdd(&netlink.Route{LinkIndex: hostEnd.Attrs().Index, Dst: host32(HostAddr), Scope: netlink.SCOPE_LINK}))
	// Replies to any sandbox go back through the uplink, which
	// masquerades them anyway: the default route leads only there.
	must(t, "default route of "+name, hn.RouteAdd(&netlink.Route{LinkIndex: hostEnd.Attrs().Index, Gw: HostAddr.AsSlice(), Flags: int(netlink.FLAG_ONLINK)}))
	return &Host{Name: name, Addr: addr, NS: ns}
}

// Contained checks that the uplink routes only to the topology's hosts,
// its own addresses and extra: no default route, nothing beyond.
func (tp *Topology) Contained(extra ...netip.Prefix) error {
	nl, err := netlink.NewHandleAt(tp.UplinkNS)
	if err != nil {
		return err
	}
	defer nl.Close()
	routes, err := nl.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list uplink routes: %w", err)
	}
	allowed := append([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.PrefixFrom(HostAddr, 32), netip.PrefixFrom(DNSAddr, 32)}, extra...)
	for _, h := range tp.Hosts {
		allowed = append(allowed, netip.PrefixFrom(h.Addr, 32))
	}
	for _, r := range routes {
		if r.Dst == nil {
			return fmt.Errorf("uplink namespace has a default route (%v): packets could leave the machine", r)
		}
		p, ok := netipPrefix(r.Dst)
		if !ok {
			return fmt.Errorf("uplink route %v: unreadable destination", r)
		}
		if p.Bits() == 0 {
			return fmt.Errorf("uplink namespace has a default route (%v): packets could leave the machine", r)
		}
		in := false
		for _, a := range allowed {
			if a.Bits() <= p.Bits() && a.Contains(p.Addr()) {
				in = true
				break
			}
		}
		if !in {
			return fmt.Errorf("uplink namespace routes to %s, outside the topology", p)
		}
	}
	return nil
}

func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits), true
}

func host32(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

func must(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// In runs f on a thread in the namespace ns: sockets f opens are ns's.
func In(ns netns.NsHandle, f func() error) error {
	return run(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		return f()
	})
}

// run runs f on a locked thread that is given back only in the
// namespace it started in.
func run(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ferr := f()
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// Listen listens in ns.
func Listen(ns netns.NsHandle, network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := In(ns, func() (err error) { ln, err = net.Listen(network, addr); return err })
	return ln, err
}

// ListenPacket listens for datagrams in ns.
func ListenPacket(ns netns.NsHandle, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := In(ns, func() (err error) { pc, err = net.ListenPacket(network, addr); return err })
	return pc, err
}

// Dial connects from ns, giving up after timeout.
func Dial(ns netns.NsHandle, network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := In(ns, func() (err error) { c, err = net.DialTimeout(network, addr, timeout); return err })
	return c, err
}

// DialUplink connects from the uplink namespace, as a host-side
// service there (an egress proxy) dials its upstreams.
func (tp *Topology) DialUplink(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := In(tp.UplinkNS, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// UplinkAddrs are the uplink namespace's own addresses: "the host's",
// which nothing of a sandbox may reach.
func (tp *Topology) UplinkAddrs() ([]netip.Addr, error) {
	nl, err := netlink.NewHandleAt(tp.UplinkNS)
	if err != nil {
		return nil, err
	}
	defer nl.Close()
	addrs, err := nl.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		if x, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, x.Unmap())
		}
	}
	return out, nil
}

// TLSConfig trusts the topology's CA.
func (tp *Topology) TLSConfig(serverName string) *tls.Config {
	return &tls.Config{RootCAs: tp.CA, ServerName: serverName}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func newCA(t testing.TB) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, "CA key", err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth nettest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, "CA", err)
	cert, err := x509.ParseCertificate(der)
	must(t, "CA", err)
	return cert, key, pemBlock("CERTIFICATE", der)
}

func leafCert(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, addr netip.Addr) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, "key", err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{name}, IPAddresses: []net.IP{addr.AsSlice()},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	must(t, "certificate", err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
