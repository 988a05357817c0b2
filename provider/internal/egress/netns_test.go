package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// netns is a network namespace the test made, with a thread in it that
// runs what must happen there: sockets made there stay there.
type netns struct {
	file *os.File
	do   chan func()
}

func newNetns(t *testing.T) *netns {
	t.Helper()
	ns := &netns{do: make(chan func())}
	ready := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- fmt.Errorf("unshare: %w", err)
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ready <- err
			return
		}
		ns.file = f
		ready <- loUp()
		for fn := range ns.do {
			fn()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(ns.do); ns.file.Close() })
	return ns
}

func (ns *netns) run(fn func()) {
	done := make(chan struct{})
	ns.do <- func() { fn(); close(done) }
	<-done
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// nft loads a ruleset into the namespace.
func (ns *netns) nft(t *testing.T, rules string) {
	t.Helper()
	cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", "nft", "-f", "-")
	cmd.ExtraFiles = []*os.File{ns.file}
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
}

// redirect sends the namespace's own TCP connections to port to the
// proxy's port, as a sandbox's namespace does.
func (ns *netns) redirect(t *testing.T, port, proxy uint16) {
	ns.nft(t, fmt.Sprintf(`table inet egress_test {
	chain out {
		type nat hook output priority -100; policy accept;
		tcp dport %d redirect to :%d
	}
}`, port, proxy))
}

func (ns *netns) listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	var err error
	ns.run(func() { ln, err = net.Listen("tcp", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func (ns *netns) dial(addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	ns.run(func() { c, err = net.Dial("tcp", addr) })
	return c, err
}

// SO_ORIGINAL_DST, IPv4 and IPv6, on connections an nftables REDIRECT
// rule sent to a listener.
func TestOriginalDstRedirected(t *testing.T) {
	ns := newNetns(t)
	ln4 := ns.listen(t, "127.0.0.1:0")
	port := uint16(ln4.Addr().(*net.TCPAddr).Port)
	ln6 := ns.listen(t, fmt.Sprintf("[::1]:%d", port))
	ns.redirect(t, 4321, port)
	for _, tc := range []struct {
		name string
		ln   net.Listener
		dst  string
	}{
		{"ipv4", ln4, "127.0.0.2:4321"},
		{"ipv6", ln6, "[::1]:4321"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ns.dial(tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := tc.ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got, err := originalDst(s)
			if err != nil || got != netip.MustParseAddrPort(tc.dst) {
				t.Errorf("original destination %v, %v; want %s", got, err, tc.dst)
			}
		})
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := originalDst(a); err == nil {
		t.Error("a pipe has an original destination")
	}
}

// The transparent path for real: a namespace whose connections to the
// world's HTTPS port go to the proxy, which learns where they were going
// from the kernel, and reaches pypi.org (in the host's namespace) only.
func TestTransparentInNamespace(t *testing.T) {
	w := newWorld(t)
	ns := newNetns(t)
	logs := &syncBuffer{}
	p, err := New(Config{
		Logger: newTestLogger(logs), Resolver: w.res, Forbidden: loopbackAllowed(), RootCAs: w.roots,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln := ns.listen(t, "127.0.0.1:0")
	go p.Serve(ln)
	ns.redirect(t, w.p443, uint16(ln.Addr().(*net.TCPAddr).Port))
	un, err := p.Register(netip.MustParseAddr("127.0.0.1"), "sb", w.allow("pypi.org"), w.pypiCreds())
	if err != nil {
		t.Fatal(err)
	}
	defer un()
	pool := w.roots.Clone()
	pool.AppendCertsFromPEM(p.CACertPEM())
	cl := &http.Client{Transport: &http.Transport{
		DialContext:       func(_ context.Context, _, addr string) (net.Conn, error) { return ns.dial(addr) },
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		DisableKeepAlives: true,
	}}
	// The sandbox resolves pypi.org itself, here to evil.example's
	// address: the proxy dials pypi.org's.
	cl.Transport.(*http.Transport).TLSClientConfig.ServerName = "pypi.org"
	code, body, err := get(cl, fmt.Sprintf("https://%s/", w.evilTLS()), "Host", "pypi.org")
	if err != nil || code != 200 || body != "pypi" {
		t.Fatalf("GET through the namespace: %d %q, %v", code, body, err)
	}
	if auths, _ := w.pypi.seen(); len(auths) != 1 || auths[0] != secret {
		t.Errorf("pypi saw %q, want the credential once", auths)
	}
	cl.Transport.(*http.Transport).TLSClientConfig.ServerName = "evil.example"
	if _, _, err := get(cl, fmt.Sprintf("https://%s/", w.evilTLS())); err == nil {
		t.Error("evil.example was reached through the namespace")
	}
	if n := w.evil.conns.Load(); n != 0 {
		t.Errorf("evil.example saw %d connections", n)
	}
}
