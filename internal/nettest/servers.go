package nettest

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// Bounds of the test servers, which answer what a sandbox sends.
const (
	maxDatagram  = 512
	serveTimeout = 10 * time.Second
)

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// serve starts h's HTTP, TLS and UDP servers; each answers with the
// host's name.
func (tp *Topology) serve(h *Host, cert tls.Certificate) {
	t := tp.t
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.request(r)
		if n, ok := bytesPath(r.URL.Path); ok {
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			io.CopyN(w, zeros{}, n)
			return
		}
		fmt.Fprintf(w, "%s\n", h.Name)
	})
	for _, port := range []int{HTTPPort, TLSPort, OtherPort} {
		ln, err := Listen(h.NS, "tcp4", netip.AddrPortFrom(h.Addr, uint16(port)).String())
		must(t, "listen on "+h.Name, err)
		ln = &hitListener{Listener: ln, host: h, port: port}
		if port == TLSPort {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: serveTimeout, WriteTimeout: serveTimeout}
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close(); <-done })
	}
	pc, err := ListenPacket(h.NS, "udp4", netip.AddrPortFrom(h.Addr, UDPPort).String())
	must(t, "listen for datagrams on "+h.Name, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, maxDatagram)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			h.hit("udp", UDPPort, from)
			pc.WriteTo([]byte(h.Name+"\n"), from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
}

// MaxBytes bounds what GET /bytes/<n> serves.
const MaxBytes = 1 << 30

// bytesPath reads /bytes/<n>: a download of n zero bytes, for
// benchmarks.
func bytesPath(path string) (int64, bool) {
	s, ok := strings.CutPrefix(path, "/bytes/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > MaxBytes {
		return 0, false
	}
	return n, true
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// maxRequests bounds the requests a host records.
const maxRequests = 1024

// Request is an HTTP request a host served (over HTTP or TLS).
type Request struct {
	TLS    bool
	Host   string
	Path   string
	Header http.Header
}

func (h *Host) request(r *http.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.requests) < maxRequests {
		h.requests = append(h.requests, Request{TLS: r.TLS != nil, Host: r.Host, Path: r.URL.Path, Header: r.Header.Clone()})
	}
}

// Requests are the HTTP requests h served so far (the first
// maxRequests).
func (h *Host) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

type hitListener struct {
	net.Listener
	host *Host
	port int
}

func (l *hitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.host.hit("tcp", l.port, c.RemoteAddr())
	}
	return c, err
}

// DNS is the topology's name server, on DNSAddr:53. It answers A
// questions from its records and NXDOMAIN for the rest.
type DNS struct {
	Host *Host
	mu   sync.Mutex
	a    map[string]netip.Addr
}

// Set makes name resolve to addr, at once: a rebinding attacker's
// server answers one address and then another.
func (d *DNS) Set(name string, addr netip.Addr) {
	d.mu.Lock()
	d.a[dns.Fqdn(name)] = addr
	d.mu.Unlock()
}

// Addr is where the server listens.
func (d *DNS) Addr() string { return netip.AddrPortFrom(d.Host.Addr, 53).String() }

func (tp *Topology) startDNS(h *Host) *DNS {
	t := tp.t
	d := &DNS{Host: h, a: map[string]netip.Addr{
		"pypi.org.": PyPIAddr, "evil.example.": EvilAddr, "git.example.": GitAddr,
	}}
	pc, err := ListenPacket(h.NS, "udp4", d.Addr())
	must(t, "listen for DNS", err)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		h.hit("udp", 53, w.RemoteAddr())
		r := new(dns.Msg)
		r.SetReply(q)
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(q.Question) == 1 {
			qn := q.Question[0]
			if a, ok := d.a[dns.CanonicalName(qn.Name)]; ok {
				if qn.Qtype == dns.TypeA {
					r.Answer = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: qn.Name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: a.AsSlice()})
				}
			} else {
				r.Rcode = dns.RcodeNameError
			}
		}
		w.WriteMsg(r)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan error, 1)
	go func() { done <- srv.ActivateAndServe() }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("DNS server: %v", err)
	}
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return d
}

// Resolver resolves through the topology's DNS server from the uplink,
// as a host-side resolver would.
func (tp *Topology) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var c net.Conn
		err := In(tp.UplinkNS, func() (err error) {
			var d net.Dialer
			c, err = d.DialContext(ctx, "udp4", tp.DNS.Addr())
			return err
		})
		return c, err
	}}
}

// Proxy is a plain TCP listener in the uplink standing for the egress
// proxy: it records each connection's original destination, which the
// kernel's DNAT left on the socket (SO_ORIGINAL_DST).
type Proxy struct {
	Addr netip.AddrPort
	// Conns receives each connection's original destination.
	Conns chan netip.AddrPort
}

// StartProxy listens on HostAddr:port in the uplink.
func (tp *Topology) StartProxy(port uint16) *Proxy {
	t := tp.t
	p := &Proxy{Addr: netip.AddrPortFrom(HostAddr, port), Conns: make(chan netip.AddrPort, 64)}
	ln, err := Listen(tp.UplinkNS, "tcp4", p.Addr.String())
	must(t, "listen as the proxy", err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dst, err := OriginalDst(c)
			if err == nil {
				select {
				case p.Conns <- dst:
				default:
				}
			}
			go answerProxied(c)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return p
}

// OriginalDst is where a connection DNAT'd to this socket was headed.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa *unix.IPv6Mreq
	var serr error
	err = raw.Control(func(fd uintptr) {
		// struct sockaddr_in comes back in the 16 bytes of an IPv6Mreq.
		sa, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.IPPROTO_IP, unix.SO_ORIGINAL_DST)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("SO_ORIGINAL_DST: %w", err)
	}
	b := sa.Multiaddr
	port := uint16(b[2])<<8 | uint16(b[3])
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port), nil
}

// answerProxied says "proxy", then reads what the client sends until it
// is done, so that closing does not reset the connection.
func answerProxied(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(serveTimeout))
	c.Write([]byte("proxy\n"))
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, io.LimitReader(c, 1<<16))
}
