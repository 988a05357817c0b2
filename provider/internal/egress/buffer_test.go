package egress

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// skmem is what the kernel holds for the TCP sockets of a network
// namespace, as ss -tm reports it (rmem_alloc and wmem_queued, in
// bytes, truesize: what the sockets charge to the host's memory).
type skmem struct {
	local, remote netip.AddrPort
	rmem, wqueued int64
}

var skmemRe = regexp.MustCompile(`skmem:\(r(\d+),rb\d+,t\d+,tb\d+,f\d+,w(\d+),`)

// sockets lists the namespace's TCP sockets and their memory.
func (ns *netns) sockets(t *testing.T) []skmem {
	t.Helper()
	cmd := exec.Command("nsenter", "--net=/proc/self/fd/3", "ss", "-tmnHO")
	cmd.ExtraFiles = []*os.File{ns.file}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ss: %v", err)
	}
	var socks []skmem
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		m := skmemRe.FindStringSubmatch(sc.Text())
		if len(f) < 5 || m == nil {
			continue
		}
		l, err1 := netip.ParseAddrPort(f[3])
		r, err2 := netip.ParseAddrPort(f[4])
		if err1 != nil || err2 != nil {
			continue // a socket not connected
		}
		rm, _ := strconv.ParseInt(m[1], 10, 64)
		wq, _ := strconv.ParseInt(m[2], 10, 64)
		socks = append(socks, skmem{local: l, remote: r, rmem: rm, wqueued: wq})
	}
	return socks
}

// relayRig is a server and a proxy relaying to it, all in a network
// namespace the test made, so that its sockets and counters are the
// test's alone. The server sends each connection that many bytes (or
// without end if 0), as fast as it can: the stream is its offset mod
// 256.
type relayRig struct {
	p     *Proxy
	ns    *netns
	dst   netip.AddrPort // the server
	proxy netip.AddrPort
	dsts  *dstTable
	sent  atomic.Int64 // by the server
}

// newRelayRig makes a relayRig whose proxy relays for one sandbox, of
// the budget and connections given (0: the defaults).
func newRelayRig(t *testing.T, budget int64, conns int, size int64) *relayRig {
	t.Helper()
	rig := &relayRig{ns: newNetns(t), dsts: &dstTable{}}
	srv := rig.ns.listen(t, netip.AddrPortFrom(pypiIP, 0).String())
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256<<10)
				for i := range buf {
					buf[i] = byte(i)
				}
				for left := size; size == 0 || left > 0; {
					n := len(buf)
					if size > 0 {
						n = int(min(left, int64(n)))
					}
					m, err := c.Write(buf[:n])
					rig.sent.Add(int64(m))
					left -= int64(m)
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	rig.dst = srv.Addr().(*net.TCPAddr).AddrPort()
	p, err := New(Config{
		Logger: newTestLogger(io.Discard), Forbidden: loopbackAllowed(), OriginalDst: rig.dsts.lookup,
		Dial:      func(_ context.Context, _, addr string) (net.Conn, error) { return rig.ns.dial(addr) },
		Bandwidth: Unlimited, ConnRate: 1e6, ConnBurst: 1 << 20, RelayBuffer: budget, MaxConnsPerSandbox: conns,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rig.p = p
	ln := rig.ns.listen(t, "127.0.0.1:0")
	go p.Serve(ln)
	rig.proxy = ln.Addr().(*net.TCPAddr).AddrPort()
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{pypiIP.String()}, Ports: []uint16{rig.dst.Port()}}
	un, err := p.Register(netip.MustParseAddr("127.0.0.1"), "sb", policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(un)
	return rig
}

// dial opens a sandbox's connection to the server, through the proxy.
func (rig *relayRig) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := rig.ns.dial(rig.proxy.String())
	if err != nil {
		t.Fatal(err)
	}
	rig.dsts.slot(c.LocalAddr().String()) <- rig.dst
	return c
}

// waitFull waits until the server can send no more: every buffer on the
// way is full.
func (rig *relayRig) waitFull(t *testing.T) {
	t.Helper()
	for last, still, deadline := int64(-1), 0, time.Now().Add(time.Minute); still < 5; {
		if time.Now().After(deadline) {
			t.Fatal("the server never stopped sending")
		}
		time.Sleep(200 * time.Millisecond)
		if n := rig.sent.Load(); n != last {
			last, still = n, 0
		} else {
			still++
		}
	}
}

// A sandbox that opens connections to a server that sends as fast as
// it can, and never reads: what the relay's sockets hold in the kernel
// (the upstream sockets' receive queues, the sandbox-side sockets' send
// queues) stays within the sandbox's relay buffer budget, where without
// it each connection holds tens of MB. Everything, the proxy's sockets
// included, lives in a namespace the test made, so that ss sees only
// them. The connections still work: one of them then reads what the
// server sent, in order.
func TestRelayBufferBound(t *testing.T) {
	const (
		conns = 16
		// budget is the connections' floors and 1 MiB to grow into.
		budget = conns*connFloor + 1<<20
		// slack is what the kernel lets a socket hold past its buffer
		// size: the segment being queued when it fills.
		slack = 128 << 10
	)
	rig := newRelayRig(t, budget, conns, 0)
	ns, dst, proxyPort := rig.ns, rig.dst, rig.proxy.Port()
	var clients []net.Conn
	for range conns {
		c := rig.dial(t)
		defer c.Close()
		clients = append(clients, c)
	}
	rig.waitFull(t)
	var relay, client, server int64
	var relaySocks int
	for _, s := range ns.sockets(t) {
		if testing.Verbose() {
			t.Logf("%v -> %v: r %d w %d", s.local, s.remote, s.rmem, s.wqueued)
		}
		held := s.rmem + s.wqueued
		switch {
		case s.local.Port() == proxyPort || s.remote == dst: // the relay's two sides
			relay += held
			relaySocks++
		case s.remote.Port() == proxyPort:
			client += held
		case s.local == dst:
			server += held
		}
	}
	t.Logf("server sent %d MB; held: relay %d KiB (%d sockets), client %d KiB, server %d KiB",
		rig.sent.Load()>>20, relay>>10, relaySocks, client>>10, server>>10)
	if relaySocks != 2*conns {
		t.Fatalf("%d relay sockets, want %d", relaySocks, 2*conns)
	}
	if most := int64(budget + 2*conns*slack); relay > most {
		t.Errorf("the relay's sockets hold %d KiB, more than the budget of %d KiB (and %d KiB of slack)",
			relay>>10, budget>>10, (most-budget)>>10)
	}
	// The relay still relays: a client that reads gets the stream,
	// whole and in order.
	c := clients[0]
	buf := make([]byte, 1<<20)
	var want byte
	for got := 0; got < 32<<20; {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(buf)
		for _, b := range buf[:n] {
			if b != want {
				t.Fatalf("byte %d of the stream is %d, want %d", got, b, want)
			}
			want++
			got++
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
	}
}

// netstat is the namespace's TCP counters (TcpExt of
// /proc/net/netstat), by name.
func (ns *netns) netstat(t *testing.T) map[string]int64 {
	t.Helper()
	var b []byte
	var err error
	ns.run(func() { b, err = os.ReadFile("/proc/thread-self/net/netstat") })
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	counts := map[string]int64{}
	for i := 0; i+1 < len(lines); i += 2 {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "TcpExt:" || len(values) != len(names) {
			continue
		}
		for j := 1; j < len(names); j++ {
			counts[names[j]], _ = strconv.ParseInt(values[j], 10, 64)
		}
	}
	return counts
}

// A sandbox that reads its downloads loses none of their segments to
// the relay's buffers: the relay sets a socket's buffers after its
// handshake advertised a window, and a receive buffer too small for
// what that window lets in drops the segments past it, which the
// sender sends again only after a retransmission timeout (200 ms, a
// download through the proxy taking twice as long). The namespace's
// counters are the test's sockets' alone.
func TestRelayNoDrops(t *testing.T) {
	const downloads, size = 4, 16 << 20
	rig := newRelayRig(t, 0, 0, size)
	for range downloads {
		c := rig.dial(t)
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		n, err := io.Copy(io.Discard, c)
		c.Close()
		if err != nil || n != size {
			t.Fatalf("downloaded %d bytes, %v", n, err)
		}
	}
	counts := rig.ns.netstat(t)
	if len(counts) == 0 {
		t.Fatal("no TcpExt counters")
	}
	t.Logf("TCPRcvQDrop %d, TCPTimeouts %d, RcvPruned %d",
		counts["TCPRcvQDrop"], counts["TCPTimeouts"], counts["RcvPruned"])
	if counts["TCPRcvQDrop"] != 0 || counts["TCPTimeouts"] != 0 {
		t.Errorf("%d segments dropped and %d retransmission timeouts in %d downloads, want none",
			counts["TCPRcvQDrop"], counts["TCPTimeouts"], downloads)
	}
}

// The upstream connections of a sandbox's HTTP client, which carry the
// connections the proxy terminates to add credentials, have fixed
// buffers paid from the sandbox's budget: one whose response was read
// fast and then no more holds at most upstreamRecvBuf, where the
// kernel's autotuning grows a socket to megabytes; one dialled with the budget spent is at
// the floor; closing them gives the budget back.
func TestUpstreamBufferBound(t *testing.T) {
	const slack = 128 << 10
	cost := int64(upstreamRecvBuf + sendBuf(minRecvBuf))
	rig := newRelayRig(t, connFloor+cost, 1, 0) // room for one to grow
	rig.p.mu.Lock()
	sb := rig.p.sandboxes[netip.MustParseAddr("127.0.0.1")]
	rig.p.mu.Unlock()
	free := func() int64 {
		sb.buf.growth.mu.Lock()
		defer sb.buf.growth.mu.Unlock()
		return sb.buf.growth.free
	}
	before := free()
	dial := func() net.Conn {
		t.Helper()
		c, err := sb.transport.DialContext(t.Context(), "tcp", rig.dst.String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	grown, floor := dial(), dial()
	if got := before - free(); got != cost {
		t.Errorf("two upstream connections took %d bytes of the budget, want %d (one's)", got, cost)
	}
	// Read fast first, as a download does until its sandbox stops
	// reading: what the kernel autotunes a buffer up to.
	for _, c := range []net.Conn{grown, floor} {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute))
		if _, err := io.CopyN(io.Discard, c, 64<<20); err != nil {
			t.Fatal(err)
		}
	}
	rig.waitFull(t)
	held := map[string]int64{}
	for _, s := range rig.ns.sockets(t) {
		held[s.local.String()] = s.rmem
	}
	for _, c := range []struct {
		name string
		conn net.Conn
		most int64
	}{{"grown", grown, upstreamRecvBuf + slack}, {"at the floor", floor, minRecvBuf + slack}} {
		got, ok := held[c.conn.LocalAddr().String()]
		t.Logf("%s: %d KiB waiting", c.name, got>>10)
		if !ok || got == 0 || got > c.most {
			t.Errorf("the upstream connection %s holds %d KiB (found %v), want at most %d KiB", c.name, got>>10, ok, c.most>>10)
		}
	}
	grown.Close()
	floor.Close()
	if got := free(); got != before {
		t.Errorf("after the close the budget has %d bytes free, want %d", got, before)
	}
}
