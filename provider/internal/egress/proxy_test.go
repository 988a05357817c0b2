package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
)

func TestTransparentListedHost(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org", "*.pythonhosted.org"))
	for _, tc := range []struct {
		name, url string
		dst       netip.AddrPort
	}{
		{"https", fmt.Sprintf("https://pypi.org:%d/simple/", w.p443), w.pypiTLS()},
		{"http", fmt.Sprintf("http://pypi.org:%d/simple/", w.p80), w.pypiHTTP()},
		{"wildcard", fmt.Sprintf("https://files.pythonhosted.org:%d/x", w.p443), w.pypiTLS()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The client trusts the test authority only: had the proxy
			// terminated TLS, the handshake would fail.
			code, body, err := get(e.client(t, "127.0.0.1", tc.dst, w.roots), tc.url)
			if err != nil || code != 200 || body != "pypi" {
				t.Fatalf("GET %s = %d %q, %v; want 200 pypi", tc.url, code, body, err)
			}
		})
	}
}

func TestTransparentUnlistedRefused(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	if _, _, err := get(e.client(t, "127.0.0.1", w.evilTLS(), w.roots), fmt.Sprintf("https://evil.example:%d/", w.p443)); err == nil {
		t.Error("HTTPS to an unlisted host succeeded")
	}
	if _, _, err := get(e.client(t, "127.0.0.1", w.evilHTTP(), w.roots), fmt.Sprintf("http://evil.example:%d/", w.p80)); err == nil {
		t.Error("HTTP to an unlisted host succeeded")
	}
	if n := e.refusals(ReasonHostNotAllowed); n != 2 {
		t.Errorf("host-not-allowed refusals = %d, want 2", n)
	}
	if n := w.evil.conns.Load(); n != 0 {
		t.Errorf("evil.example saw %d connections", n)
	}
	if !strings.Contains(e.logs.String(), `"reason":"host-not-allowed"`) || !strings.Contains(e.logs.String(), `"name":"evil.example"`) {
		t.Errorf("refusal not logged with its name and reason:\n%s", e.logs)
	}
}

func TestTransparentAddressLiteral(t *testing.T) {
	w := newWorld(t)
	t.Run("refused", func(t *testing.T) {
		e := w.proxy(t, nil)
		e.register(t, "127.0.0.1", w.allow("pypi.org"))
		// An HTTP request naming an address, and TLS with no server name.
		if code, _, err := get(e.client(t, "127.0.0.1", w.evilHTTP(), nil), fmt.Sprintf("http://%s/", w.evilHTTP())); err == nil {
			t.Errorf("HTTP to an address literal answered %d", code)
		}
		c := e.dial(t, "127.0.0.1", w.evilTLS())
		if err := tls.Client(c, &tls.Config{InsecureSkipVerify: true}).Handshake(); err == nil {
			t.Error("TLS without a server name was relayed")
		}
		if n := e.refusals(ReasonNoName); n != 2 {
			t.Errorf("no-name refusals = %d, want 2", n)
		}
		if n := w.evil.conns.Load(); n != 0 {
			t.Errorf("evil.example saw %d connections", n)
		}
	})
	t.Run("allowed by a CIDR rule", func(t *testing.T) {
		e := w.proxy(t, nil)
		policy := w.allow("pypi.org")
		policy.CIDRs = []string{evilIP.String()}
		e.register(t, "127.0.0.1", policy)
		code, body, err := get(e.client(t, "127.0.0.1", w.evilHTTP(), nil), fmt.Sprintf("http://%s/", w.evilHTTP()))
		if err != nil || code != 200 || body != "evil" {
			t.Fatalf("GET by a CIDR rule = %d %q, %v", code, body, err)
		}
		// A server-first protocol: no byte from the client, still relayed.
		c := e.dial(t, "127.0.0.1", w.evilHTTP())
		if _, err := c.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(c); !strings.HasSuffix(string(b), "evil") {
			t.Errorf("raw relay answered %q", b)
		}
	})
}

// A sandbox that sends its connection to evil.example's address with
// pypi.org as its server name reaches pypi.org: the proxy dials the name.
func TestForgedServerNameReachesTheNameOnly(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	code, body, err := get(e.client(t, "127.0.0.1", w.evilTLS(), w.roots), fmt.Sprintf("https://pypi.org:%d/", w.p443))
	if err != nil || code != 200 || body != "pypi" {
		t.Fatalf("forged destination: %d %q, %v; want pypi's answer", code, body, err)
	}
	code, body, err = get(e.client(t, "127.0.0.1", w.evilHTTP(), nil), fmt.Sprintf("http://pypi.org:%d/", w.p80))
	if err != nil || code != 200 || body != "pypi" {
		t.Fatalf("forged destination over HTTP: %d %q, %v; want pypi's answer", code, body, err)
	}
	if n := w.evil.conns.Load(); n != 0 {
		t.Errorf("evil.example saw %d connections", n)
	}
	// A server name that is allowed but a certificate check the client
	// skips: still pypi.org's server, whatever Host the request says.
	cl := e.client(t, "127.0.0.1", w.evilTLS(), nil)
	cl.Transport.(*http.Transport).TLSClientConfig = &tls.Config{ServerName: "pypi.org", InsecureSkipVerify: true}
	_, body, err = get(cl, fmt.Sprintf("https://%s/", w.evilTLS()), "Host", "evil.example")
	if err != nil || body != "pypi" {
		t.Errorf("forged Host inside a spliced connection: %q, %v; want pypi's answer", body, err)
	}
}

// A name that resolves to a public address the first time and to
// loopback the next: each connection resolves once, and dials what it
// checked.
func TestRebindingResolver(t *testing.T) {
	w := newWorld(t)
	public := netip.MustParseAddr("203.0.113.7")
	w.res.setFunc("rebind.example", func(n int) []netip.Addr {
		if n == 1 {
			return []netip.Addr{public}
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.2")}
	})
	var mu sync.Mutex
	var dialed []string
	e := w.proxy(t, func(c *Config) {
		c.Forbidden = nil // the defaults, loopback included
		// Records the dials and makes none: the test sends nothing beyond loopback.
		c.Dial = func(_ context.Context, _, addr string) (net.Conn, error) {
			mu.Lock()
			defer mu.Unlock()
			dialed = append(dialed, addr)
			return nil, errors.New("test dialer dials nothing")
		}
	})
	e.register(t, "127.0.0.1", w.allow("rebind.example"))
	for i := range 2 {
		c := e.dial(t, "127.0.0.1", w.evilHTTP())
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: rebind.example\r\n\r\n")
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Errorf("connection %d answered %q", i, b)
		}
		if n := w.res.count("rebind.example"); n != i+1 {
			t.Errorf("after connection %d the name was resolved %d times, want %d", i, n, i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := netip.AddrPortFrom(public, w.p80).String(); len(dialed) != 1 || dialed[0] != want {
		t.Errorf("dialed %v, want only %s, the address checked", dialed, want)
	}
	if e.refusals(ReasonDial) != 1 || e.refusals(ReasonAddrForbidden) != 1 {
		t.Errorf("refusals %v, want one dial and one addr-forbidden", e.p.Stats().Refused)
	}
}

// The default forbidden ranges and the host's own addresses refuse a
// name that leads to them, unless a CIDR rule lists the address.
func TestDefaultForbidden(t *testing.T) {
	w := newWorld(t)
	hostAddr := netip.MustParseAddr("198.51.100.9") // a public address the host has, by the test's say
	e := w.proxy(t, func(c *Config) {
		c.Forbidden = nil
		c.HostAddrs = func() ([]netip.Addr, error) { return []netip.Addr{hostAddr, netip.MustParseAddr("127.0.0.1")}, nil }
	})
	cases := map[string]string{
		"loopback.example":  "127.0.0.2",
		"loopback6.example": "::1",
		"metadata.example":  "169.254.169.254",
		"private.example":   "10.1.2.3",
		"private2.example":  "192.168.1.1",
		"private3.example":  "172.16.5.5",
		"cgnat.example":     "100.64.0.1",
		"zero.example":      "0.0.0.0",
		"ula.example":       "fd00::1",
		"linklocal.example": "fe80::1",
		"mcast.example":     "239.1.1.1",
		"mapped.example":    "::ffff:10.0.0.1",
		"host.example":      hostAddr.String(),
	}
	var hosts []string
	for name, a := range cases {
		w.res.set(name, netip.MustParseAddr(a))
		hosts = append(hosts, name)
	}
	w.res.set("public.example", netip.MustParseAddr("203.0.113.8"))
	policy := w.allow(append(hosts, "public.example", "listed.example")...)
	policy.CIDRs = []string{"10.9.0.0/16", hostAddr.String()}
	w.res.set("listed.example", netip.MustParseAddr("10.9.1.1"))
	un, err := e.p.Register(netip.MustParseAddr("127.0.0.1"), "sb", policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer un()
	sb := e.p.sandboxes[netip.MustParseAddr("127.0.0.1")]
	for name, a := range cases {
		if _, r := e.p.decide(t.Context(), sb, name, w.p443); r == nil || r.Reason != ReasonAddrForbidden {
			t.Errorf("%s (%s): %v, want addr-forbidden", name, a, r)
		}
	}
	if addrs, r := e.p.decide(t.Context(), sb, "public.example", w.p443); r != nil || len(addrs) != 1 {
		t.Errorf("public.example: %v %v, want its address", addrs, r)
	}
	if addrs, r := e.p.decide(t.Context(), sb, "listed.example", w.p443); r != nil || len(addrs) != 1 {
		t.Errorf("listed.example, in a CIDR rule: %v %v, want its address", addrs, r)
	}
	// Literals: a CIDR rule's address, yes; the host's own, never.
	if _, r := e.p.decide(t.Context(), sb, "10.9.3.3", w.p443); r != nil {
		t.Errorf("literal in a CIDR rule: %v", r)
	}
	if _, r := e.p.decide(t.Context(), sb, hostAddr.String(), w.p443); r == nil {
		t.Error("the host's own address, even listed, was allowed")
	}
	if _, r := e.p.decide(t.Context(), sb, "169.254.169.254", 80); r == nil {
		t.Error("the metadata address as a literal was allowed")
	}
	// An open policy reaches public literals, never forbidden ones.
	open := &sandbox{policy: provider.Network{Mode: provider.NetworkOpen}}
	if _, r := e.p.decide(t.Context(), open, "203.0.113.9", 443); r != nil {
		t.Errorf("open policy, public literal: %v", r)
	}
	for _, a := range []string{"127.0.0.1", "169.254.169.254", "10.0.0.1", "[::1]", hostAddr.String()} {
		if _, r := e.p.decide(t.Context(), open, a, 443); r == nil {
			t.Errorf("open policy reached %s", a)
		}
	}
	if _, r := e.p.decide(t.Context(), open, "metadata.example", 443); r == nil {
		t.Error("open policy reached a name of the metadata address")
	}
}

func TestHostAddrsOfTheMachine(t *testing.T) {
	addrs, err := interfaceAddrs()
	if err != nil || len(addrs) == 0 {
		t.Fatalf("interface addresses: %v %v", addrs, err)
	}
	w := newWorld(t)
	e := w.proxy(t, func(c *Config) { c.Forbidden = []netip.Prefix{} })
	sb := &sandbox{policy: provider.Network{Mode: provider.NetworkOpen}}
	for _, a := range addrs {
		w.res.set("self.example", a)
		if _, r := e.p.decide(t.Context(), sb, "self.example", 443); r == nil {
			t.Errorf("a name of the host's address %s was allowed with no forbidden range at all", a)
		}
	}
}

func TestExplicitMode(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	cl := e.explicitClient("127.0.0.1", w.roots)
	for _, u := range []string{fmt.Sprintf("https://pypi.org:%d/", w.p443), fmt.Sprintf("http://pypi.org:%d/", w.p80)} {
		if code, body, err := get(cl, u); err != nil || code != 200 || body != "pypi" {
			t.Errorf("GET %s = %d %q, %v", u, code, body, err)
		}
	}
	if code, _, err := get(cl, fmt.Sprintf("http://evil.example:%d/", w.p80)); err != nil || code != 403 {
		t.Errorf("HTTP to an unlisted host: %d, %v; want 403", code, err)
	}
	if _, _, err := get(cl, fmt.Sprintf("https://evil.example:%d/", w.p443)); err == nil {
		t.Error("CONNECT to an unlisted host succeeded")
	}
	if n := w.evil.conns.Load(); n != 0 {
		t.Errorf("evil.example saw %d connections", n)
	}
	for _, tc := range []struct{ name, req, want string }{
		{"unlisted port", "CONNECT pypi.org:22 HTTP/1.1\r\nHost: pypi.org:22\r\n\r\n", "403"},
		{"no port", "CONNECT pypi.org HTTP/1.1\r\nHost: pypi.org\r\n\r\n", "400"},
		{"literal", fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", w.evilTLS()), "403"},
		{"origin form", "GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n", "400"},
		{"absolute https", fmt.Sprintf("GET https://pypi.org:%d/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n", w.p443), "400"},
		// The absolute form's host is the request's (RFC 9112, 3.2.2), not Host's.
		{"host header ignored", fmt.Sprintf("GET http://pypi.org:%d/ HTTP/1.1\r\nHost: evil.example\r\n\r\n", w.p80), "200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", e.xAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.req)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(resp.StatusCode); got != tc.want {
				t.Errorf("status %s, want %s", got, tc.want)
			}
		})
	}
}

func TestUnknownSourceRefused(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.99")}}
	for _, addr := range []string{e.tAddr, e.xAddr} {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org\r\n\r\n", w.p443)
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Errorf("an unregistered source was answered %q", b)
		}
		c.Close()
	}
	if n := e.refusals(ReasonUnknownSource); n != 2 {
		t.Errorf("unknown-source refusals = %d, want 2", n)
	}
}

// connectTunnel opens an explicit-mode tunnel from src to pypi.org.
func (e *env) connectTunnel(t *testing.T, src string) (net.Conn, error) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.Dial("tcp", e.xAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org\r\n\r\n", e.p443)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return c, nil
}

func TestConnectionBounds(t *testing.T) {
	w := newWorld(t)
	t.Run("per sandbox", func(t *testing.T) {
		e := w.proxy(t, func(c *Config) { c.MaxConnsPerSandbox = 2 })
		e.register(t, "127.0.0.11", w.allow("pypi.org"))
		e.register(t, "127.0.0.12", w.allow("pypi.org"))
		var held []net.Conn
		for range 2 {
			c, err := e.connectTunnel(t, "127.0.0.11")
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		if _, err := e.connectTunnel(t, "127.0.0.11"); err == nil {
			t.Error("a third connection was taken")
		}
		if _, err := e.connectTunnel(t, "127.0.0.12"); err != nil {
			t.Errorf("another sandbox was refused: %v", err)
		}
		if n := e.refusals(ReasonSandboxConns); n != 1 {
			t.Errorf("sandbox-conns refusals = %d, want 1", n)
		}
		// The connections within the bound still work.
		if err := tls.Client(held[1], &tls.Config{ServerName: "pypi.org", RootCAs: w.roots}).Handshake(); err != nil {
			t.Errorf("a held connection: %v", err)
		}
		// A connection closed frees its slot.
		held[0].Close()
		waitFor(t, func() bool { return e.p.Stats().Active == 2 })
		if _, err := e.connectTunnel(t, "127.0.0.11"); err != nil {
			t.Errorf("after a close: %v", err)
		}
	})
	t.Run("total", func(t *testing.T) {
		e := w.proxy(t, func(c *Config) { c.MaxConns = 1 })
		e.register(t, "127.0.0.11", w.allow("pypi.org"))
		e.register(t, "127.0.0.12", w.allow("pypi.org"))
		if _, err := e.connectTunnel(t, "127.0.0.11"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.connectTunnel(t, "127.0.0.12"); err == nil {
			t.Error("a connection beyond the total was taken")
		}
		if n := e.refusals(ReasonTotalConns); n != 1 {
			t.Errorf("total-conns refusals = %d, want 1", n)
		}
	})
	t.Run("rate", func(t *testing.T) {
		e := w.proxy(t, func(c *Config) { c.ConnRate, c.ConnBurst = 1e-6, 1 })
		e.register(t, "127.0.0.11", w.allow("pypi.org"))
		if _, err := e.connectTunnel(t, "127.0.0.11"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.connectTunnel(t, "127.0.0.11"); err == nil {
			t.Error("a connection beyond the rate was taken")
		}
		if n := e.refusals(ReasonConnRate); n != 1 {
			t.Errorf("conn-rate refusals = %d, want 1", n)
		}
	})
	t.Run("unregister ends connections", func(t *testing.T) {
		e := w.proxy(t, nil)
		un, err := e.p.Register(netip.MustParseAddr("127.0.0.11"), "sb", w.allow("pypi.org"), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := e.connectTunnel(t, "127.0.0.11")
		if err != nil {
			t.Fatal(err)
		}
		un()
		un()
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read after unregister: %v", err)
		}
		if _, err := e.connectTunnel(t, "127.0.0.11"); err == nil {
			t.Error("an unregistered sandbox's connection was taken")
		}
	})
}

// waitFor waits for cond, which the proxy's goroutines make true, and
// fails the test if it does not hold within 30 s (a failure, not a
// timing threshold: the conditions hold within milliseconds).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, "the proxy's state", 30*time.Second, cond)
}

func TestSlowHeader(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, func(c *Config) { c.HeaderTimeout = 50 * time.Millisecond })
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	for _, tc := range []struct {
		name  string
		start []byte
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: pyp")},
		{"tls", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}},
		{"nothing", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.dial(t, "127.0.0.1", w.pypiHTTP())
			c.Write(tc.start)
			if b, _ := io.ReadAll(c); len(b) != 0 {
				t.Errorf("answered %q", b)
			}
		})
	}
	t.Run("explicit", func(t *testing.T) {
		c, err := net.Dial("tcp", e.xAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "CONNECT pypi.org:443 HTTP/1.1\r\nHost: py")
		b, _ := io.ReadAll(c)
		if strings.Contains(string(b), "200") {
			t.Errorf("answered %q", b)
		}
	})
	if n := e.refusals(ReasonHeader); n != 3 {
		t.Errorf("header refusals = %d, want 3", n)
	}
	waitFor(t, func() bool { return e.p.Stats().Active == 0 })
}

func TestHeaderTooLarge(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, func(c *Config) { c.MaxHeaderBytes = 1024 })
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	c := e.dial(t, "127.0.0.1", w.pypiHTTP())
	go fmt.Fprintf(c, "GET / HTTP/1.1\r\nX: %s\r\nHost: pypi.org\r\n\r\n", strings.Repeat("a", 4096))
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Errorf("answered %q", b)
	}
	if n := e.refusals(ReasonHeader); n != 1 {
		t.Errorf("header refusals = %d, want 1", n)
	}
}

// TestRequestBodyNotAwaited: the proxy decides on a request's headers
// and relays them at once: a client that sent "Expect: 100-continue"
// sends its body only once the server answered.
func TestRequestBodyNotAwaited(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, func(c *Config) { c.HeaderTimeout = time.Hour })
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	c := e.dial(t, "127.0.0.1", w.pypiHTTP())
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: pypi.org\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(time.Minute)) // a failure, not a wait: the answer takes milliseconds
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer before the body: %v", err)
	}
	if resp.StatusCode != 100 && resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// pypiCreds are the credentials for pypi.org on the world's two ports.
func (w *world) pypiCreds() []Credential {
	return []Credential{
		{Host: fmt.Sprintf("pypi.org:%d", w.p443), Header: "Authorization", Value: secret},
		{Host: fmt.Sprintf("pypi.org:%d", w.p80), Header: "Authorization", Value: secret},
	}
}

var pypiCred = Credential{Host: "pypi.org", Header: "Authorization", Value: secret}

func TestCredentials(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org", "files.pythonhosted.org"), w.pypiCreds()...)
	t.Run("https, terminated", func(t *testing.T) {
		// The client trusts the proxy's authority only, and sends its own
		// Authorization, which the proxy replaces.
		code, body, err := get(e.client(t, "127.0.0.1", w.pypiTLS(), e.proxyRoots()), fmt.Sprintf("https://pypi.org:%d/a", w.p443), "Authorization", "mine")
		if err != nil || code != 200 || body != "pypi" {
			t.Fatalf("GET = %d %q, %v", code, body, err)
		}
	})
	t.Run("http", func(t *testing.T) {
		code, body, err := get(e.client(t, "127.0.0.1", w.pypiHTTP(), nil), fmt.Sprintf("http://pypi.org:%d/b", w.p80))
		if err != nil || code != 200 || body != "pypi" {
			t.Fatalf("GET = %d %q, %v", code, body, err)
		}
	})
	t.Run("explicit https", func(t *testing.T) {
		code, body, err := get(e.explicitClient("127.0.0.1", e.proxyRoots()), fmt.Sprintf("https://pypi.org:%d/c", w.p443))
		if err != nil || code != 200 || body != "pypi" {
			t.Fatalf("GET = %d %q, %v", code, body, err)
		}
	})
	t.Run("explicit http", func(t *testing.T) {
		code, body, err := get(e.explicitClient("127.0.0.1", nil), fmt.Sprintf("http://pypi.org:%d/d", w.p80))
		if err != nil || code != 200 || body != "pypi" {
			t.Fatalf("GET = %d %q, %v", code, body, err)
		}
	})
	auths, _ := w.pypi.seen()
	if len(auths) != 4 {
		t.Fatalf("pypi saw %d requests, want 4", len(auths))
	}
	for i, a := range auths {
		if a != secret {
			t.Errorf("request %d reached pypi with Authorization %q", i, a)
		}
	}
	t.Run("host without credentials is not terminated", func(t *testing.T) {
		if _, _, err := get(e.client(t, "127.0.0.1", w.pypiTLS(), e.proxyRoots()), fmt.Sprintf("https://files.pythonhosted.org:%d/", w.p443)); err == nil {
			t.Error("the proxy's authority was presented for a host without credentials")
		}
		code, _, err := get(e.client(t, "127.0.0.1", w.pypiTLS(), w.roots), fmt.Sprintf("https://files.pythonhosted.org:%d/", w.p443))
		if err != nil || code != 200 {
			t.Errorf("spliced host: %d, %v", code, err)
		}
		auths, _ := w.pypi.seen()
		if a := auths[len(auths)-1]; a != "" {
			t.Errorf("a host without credentials was sent %q", a)
		}
	})
	t.Run("host header mismatch", func(t *testing.T) {
		code, _, err := get(e.client(t, "127.0.0.1", w.pypiTLS(), e.proxyRoots()), fmt.Sprintf("https://pypi.org:%d/", w.p443), "Host", "evil.example")
		if err != nil || code != http.StatusMisdirectedRequest {
			t.Errorf("Host evil.example inside pypi.org's TLS: %d, %v; want 421", code, err)
		}
		code, _, err = get(e.client(t, "127.0.0.1", w.pypiHTTP(), nil), fmt.Sprintf("http://pypi.org:%d/", w.p80), "Host", "evil.example")
		if err == nil {
			// Plain HTTP names evil.example in its first request: refused as unlisted.
			t.Errorf("Host evil.example over HTTP answered %d", code)
		}
		if n := w.evil.conns.Load(); n != 0 {
			t.Errorf("evil.example saw %d connections", n)
		}
	})
	t.Run("keep-alive checks every request", func(t *testing.T) {
		c := e.dial(t, "127.0.0.1", w.pypiHTTP())
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET /1 HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
		r1, err := http.ReadResponse(br, nil)
		if err != nil || r1.StatusCode != 200 {
			t.Fatalf("first request: %v %v", r1, err)
		}
		io.Copy(io.Discard, r1.Body)
		fmt.Fprintf(c, "GET /2 HTTP/1.1\r\nHost: evil.example\r\n\r\n")
		r2, err := http.ReadResponse(br, nil)
		if err != nil || r2.StatusCode != http.StatusMisdirectedRequest {
			t.Fatalf("second request, to another host: %v %v", r2, err)
		}
	})
	t.Run("server name mismatch in a tunnel", func(t *testing.T) {
		c, err := e.connectTunnel(t, "127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "evil.example", RootCAs: e.proxyRoots()})
		if err := tc.Handshake(); err == nil {
			t.Error("a tunnel to pypi.org with evil.example's server name was terminated")
		}
	})
}

func TestCredentialsNeverLogged(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"), w.pypiCreds()...)
	get(e.client(t, "127.0.0.1", w.pypiTLS(), e.proxyRoots()), fmt.Sprintf("https://pypi.org:%d/", w.p443))
	get(e.client(t, "127.0.0.1", w.pypiTLS(), e.proxyRoots()), fmt.Sprintf("https://pypi.org:%d/", w.p443), "Host", "evil.example")
	get(e.client(t, "127.0.0.1", w.evilHTTP(), nil), fmt.Sprintf("http://evil.example:%d/", w.p80))
	// Upstream gone: the failure is logged.
	w.res.set("pypi.org", netip.MustParseAddr("127.0.0.4"))
	get(e.client(t, "127.0.0.1", w.pypiHTTP(), nil), fmt.Sprintf("http://pypi.org:%d/", w.p80))
	e.p.log.Info("a credential", "cred", pypiCred, "creds", []Credential{pypiCred})
	logs := e.logs.String()
	if !strings.Contains(logs, "REDACTED") || !strings.Contains(logs, `"reason":"name-mismatch"`) {
		t.Errorf("the log lacks what the test made:\n%s", logs)
	}
	for _, s := range []string{fmt.Sprint(pypiCred), fmt.Sprintf("%+v", pypiCred), fmt.Sprintf("%#v", pypiCred), fmt.Sprint([]Credential{pypiCred}), logs} {
		if strings.Contains(s, "s3cret") {
			t.Errorf("the secret is in %q", s)
		}
	}
}

func TestRegisterValidates(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	src := netip.MustParseAddr("127.0.0.1")
	for _, tc := range []struct {
		name   string
		policy provider.Network
		creds  []Credential
	}{
		{"bad policy", provider.Network{Mode: "sometimes"}, nil},
		{"allow without rules", provider.Network{Mode: provider.NetworkAllow}, nil},
		{"credential for an address", w.allow("pypi.org"), []Credential{{Host: "10.0.0.1", Header: "Authorization", Value: secret}}},
		{"credential framing header", w.allow("pypi.org"), []Credential{{Host: "pypi.org", Header: "Content-Length", Value: secret}}},
		{"credential bad header", w.allow("pypi.org"), []Credential{{Host: "pypi.org", Header: "Auth orization", Value: secret}}},
		{"credential value with a newline", w.allow("pypi.org"), []Credential{{Host: "pypi.org", Header: "Authorization", Value: secret + "\r\nX-Evil: 1"}}},
		{"credential empty", w.allow("pypi.org"), []Credential{{Host: "pypi.org", Header: "Authorization"}}},
		{"too many credentials", w.allow("pypi.org"), make([]Credential, MaxCredentials+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.p.Register(src, "sb", tc.policy, tc.creds)
			if !errors.Is(err, errdefs.ErrBadInput) {
				t.Fatalf("Register: %v, want bad input", err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error holds the secret: %v", err)
			}
		})
	}
	un, err := e.p.Register(src, "sb", w.allow("pypi.org"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Register(src, "sb2", w.allow("pypi.org"), nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Register of a source: %v, want already exists", err)
	}
	un()
	if un, err := e.p.Register(netip.MustParseAddr("::ffff:127.0.0.1"), "sb3", w.allow("pypi.org"), nil); err != nil {
		t.Errorf("Register after unregister: %v", err)
	} else {
		un()
	}
}

func TestCloseEndsServe(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	c, err := e.connectTunnel(t, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	e.p.Close()
	if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("read after Close: %v", err)
	}
	if _, err := e.p.Register(netip.MustParseAddr("127.0.0.5"), "x", w.allow("pypi.org"), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Register after Close: %v", err)
	}
	// Serve after Close closes its listener: a start and a stop that
	// race leave no port bound.
	for name, serve := range map[string]func(net.Listener) error{"Serve": e.p.Serve, "ServeExplicit": e.p.ServeExplicit} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := serve(ln); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			t.Errorf("%s after Close left its listener open", name)
		}
	}
}

func TestDownloadThroughProxy(t *testing.T) {
	w := newWorld(t)
	e := w.proxy(t, nil)
	e.register(t, "127.0.0.1", w.allow("pypi.org"))
	for _, tc := range []struct {
		name string
		cl   *http.Client
		url  string
	}{
		{"transparent", e.client(t, "127.0.0.1", w.pypiTLS(), w.roots), fmt.Sprintf("https://pypi.org:%d/big", w.p443)},
		{"explicit", e.explicitClient("127.0.0.1", w.roots), fmt.Sprintf("http://pypi.org:%d/big", w.p80)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, err := get(tc.cl, tc.url)
			if err != nil || code != 200 || len(body) != bigSize || body[:16] != "0123456789abcdef" {
				t.Fatalf("download: %d, %d bytes, %v", code, len(body), err)
			}
		})
	}
}
