package egress

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// The test world: "pypi.org" (and files.pythonhosted.org) served at
// 127.0.0.2, "evil.example" at 127.0.0.3, on the same two ports, one
// TLS with certificates of a test authority and one plain HTTP.
var (
	pypiIP = netip.MustParseAddr("127.0.0.2")
	evilIP = netip.MustParseAddr("127.0.0.3")
)

const secret = "Bearer s3cret-7f1e9a"

type upstream struct {
	name  string
	conns atomic.Int64 // connections accepted, either port
	mu    sync.Mutex
	auths []string // the Authorization of each request
	hosts []string
}

func (u *upstream) seen() ([]string, []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auths...), append([]string(nil), u.hosts...)
}

type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

type world struct {
	roots      *x509.CertPool // the test authority, which signed the upstreams' certificates
	pypi, evil *upstream
	p443, p80  uint16
	res        *fakeResolver
}

func newWorld(t *testing.T) *world {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	w := &world{roots: x509.NewCertPool(), res: newFakeResolver()}
	w.roots.AddCert(caCert)
	leaf := func(names ...string) tls.Certificate {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	w.pypi = &upstream{name: "pypi"}
	w.evil = &upstream{name: "evil"}
	pypiTLS, evilTLS := samePort(t, pypiIP, evilIP)
	pypiHTTP, evilHTTP := samePort(t, pypiIP, evilIP)
	w.p443 = uint16(pypiTLS.Addr().(*net.TCPAddr).Port)
	w.p80 = uint16(pypiHTTP.Addr().(*net.TCPAddr).Port)
	serve(t, w.pypi, tls.NewListener(countingListener{pypiTLS, &w.pypi.conns}, &tls.Config{Certificates: []tls.Certificate{leaf("pypi.org", "files.pythonhosted.org")}}))
	serve(t, w.pypi, countingListener{pypiHTTP, &w.pypi.conns})
	serve(t, w.evil, tls.NewListener(countingListener{evilTLS, &w.evil.conns}, &tls.Config{Certificates: []tls.Certificate{leaf("evil.example")}}))
	serve(t, w.evil, countingListener{evilHTTP, &w.evil.conns})
	w.res.set("pypi.org", pypiIP)
	w.res.set("files.pythonhosted.org", pypiIP)
	w.res.set("evil.example", evilIP)
	return w
}

// samePort listens on a and b on one port, so that a connection's
// address can be swapped for the other's.
func samePort(t *testing.T, a, b netip.Addr) (net.Listener, net.Listener) {
	t.Helper()
	for range 20 {
		la, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		port := la.Addr().(*net.TCPAddr).Port
		lb, err := net.Listen("tcp", netip.AddrPortFrom(b, uint16(port)).String())
		if err == nil {
			return la, lb
		}
		_ = la.Close()
	}
	t.Fatal("no port free on both addresses")
	return nil, nil
}

func serve(t *testing.T, u *upstream, ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auths = append(u.auths, r.Header.Get("Authorization"))
		u.hosts = append(u.hosts, r.Host)
		u.mu.Unlock()
		if r.URL.Path == "/big" {
			rw.Header().Set("Content-Length", fmt.Sprint(bigSize))
			writeBig(rw)
			return
		}
		fmt.Fprintf(rw, "%s", u.name)
	}), ErrorLog: slog.NewLogLogger(slog.DiscardHandler, 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

const bigSize = 1 << 20

var bigBlock = bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB

func writeBig(w interface{ Write([]byte) (int, error) }) {
	for left := bigSize; left > 0; left -= len(bigBlock) {
		if _, err := w.Write(bigBlock[:min(left, len(bigBlock))]); err != nil {
			return
		}
	}
}

// fakeResolver answers from a table, or from a function of how many
// times the name was asked, and counts the questions.
type fakeResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
	fn    map[string]func(n int) []netip.Addr
	calls map[string]int
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{addrs: map[string][]netip.Addr{}, fn: map[string]func(int) []netip.Addr{}, calls: map[string]int{}}
}

func (r *fakeResolver) set(name string, addrs ...netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addrs[name] = addrs
}

func (r *fakeResolver) setFunc(name string, fn func(int) []netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fn[name] = fn
}

func (r *fakeResolver) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[name]
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	r.calls[host]++
	if fn, ok := r.fn[host]; ok {
		return fn(r.calls[host]), nil
	}
	if a, ok := r.addrs[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// dstTable plays conntrack for tests of the transparent path without a
// namespace: the test says where each of its connections was going.
type dstTable struct {
	mu sync.Mutex
	m  map[string]chan netip.AddrPort
}

func (d *dstTable) slot(k string) chan netip.AddrPort {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]chan netip.AddrPort{}
	}
	if d.m[k] == nil {
		d.m[k] = make(chan netip.AddrPort, 1)
	}
	return d.m[k]
}

func (d *dstTable) lookup(c net.Conn) (netip.AddrPort, error) {
	select {
	case a := <-d.slot(c.RemoteAddr().String()):
		return a, nil
	case <-time.After(time.Minute):
		return netip.AddrPort{}, errors.New("test gave no destination")
	}
}

// syncBuffer collects log output from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// env is a proxy in the test world, serving both modes on loopback.
type env struct {
	*world
	p      *Proxy
	tAddr  string // transparent
	xAddr  string // explicit
	logs   *syncBuffer
	dsts   *dstTable
	served chan error
}

// loopbackAllowed is the default forbidden set without 127.0.0.0/8, so
// that the test's upstreams on loopback can be reached by name.
func loopbackAllowed() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range DefaultForbidden() {
		if p != netip.MustParsePrefix("127.0.0.0/8") {
			out = append(out, p)
		}
	}
	return out
}

func (w *world) proxy(t *testing.T, mod func(*Config)) *env {
	t.Helper()
	e := &env{world: w, logs: &syncBuffer{}, dsts: &dstTable{}, served: make(chan error, 2)}
	cfg := Config{
		Logger:      slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Resolver:    w.res,
		Forbidden:   loopbackAllowed(),
		RootCAs:     w.roots,
		OriginalDst: e.dsts.lookup,
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.tAddr, e.xAddr = tl.Addr().String(), xl.Addr().String()
	go func() { e.served <- p.Serve(tl) }()
	go func() { e.served <- p.ServeExplicit(xl) }()
	t.Cleanup(func() {
		_ = p.Close()
		for range 2 {
			if err := <-e.served; !errors.Is(err, ErrClosed) {
				t.Errorf("Serve returned %v, want ErrClosed", err)
			}
		}
	})
	return e
}

// allow is a policy listing hosts on the world's two ports.
func (w *world) allow(hosts ...string) provider.Network {
	return provider.Network{Mode: provider.NetworkAllow, Hosts: hosts, Ports: []uint16{w.p443, w.p80}}
}

func (e *env) register(t *testing.T, src string, policy provider.Network, creds ...Credential) {
	t.Helper()
	un, err := e.p.Register(netip.MustParseAddr(src), "sb-"+src, policy, creds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(un)
}

// dial opens a transparent-mode connection from src as though it were
// going to dst.
func (e *env) dial(t *testing.T, src string, dst netip.AddrPort) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", e.tAddr)
	if err != nil {
		t.Fatal(err)
	}
	e.dsts.slot(c.LocalAddr().String()) <- dst
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// client is an HTTP client whose every connection goes through the
// transparent proxy from src, as though to dst.
func (e *env) client(t *testing.T, src string, dst netip.AddrPort, roots *x509.CertPool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return e.dial(t, src, dst), nil },
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
}

// explicitClient is an HTTP client using the explicit proxy from src.
func (e *env) explicitClient(src string, roots *x509.CertPool) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return &http.Client{Transport: &http.Transport{
		Proxy:             func(*http.Request) (*url.URL, error) { return &url.URL{Scheme: "http", Host: e.xAddr}, nil },
		DialContext:       d.DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}}
}

func (w *world) pypiTLS() netip.AddrPort  { return netip.AddrPortFrom(pypiIP, w.p443) }
func (w *world) pypiHTTP() netip.AddrPort { return netip.AddrPortFrom(pypiIP, w.p80) }
func (w *world) evilTLS() netip.AddrPort  { return netip.AddrPortFrom(evilIP, w.p443) }
func (w *world) evilHTTP() netip.AddrPort { return netip.AddrPortFrom(evilIP, w.p80) }

func get(c *http.Client, u string, hdr ...string) (int, string, error) {
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return 0, "", err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (e *env) refusals(r Reason) uint64 { return e.p.Stats().Refused[r] }

// proxyRoots trusts the proxy's authority only.
func (e *env) proxyRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.p.CACertPEM())
	return pool
}

func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
