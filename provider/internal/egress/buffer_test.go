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
	ns := newNetns(t)
	srv := ns.listen(t, netip.AddrPortFrom(pypiIP, 0).String())
	var sent atomic.Int64
	go func() {
		for {
			c, err := srv.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256<<10) // the stream is its offset mod 256
				for i := range buf {
					buf[i] = byte(i)
				}
				for {
					n, err := c.Write(buf)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	dst := srv.Addr().(*net.TCPAddr).AddrPort()
	dsts := &dstTable{}
	p, err := New(Config{
		Logger: newTestLogger(io.Discard), Forbidden: loopbackAllowed(), OriginalDst: dsts.lookup,
		Dial:      func(_ context.Context, _, addr string) (net.Conn, error) { return ns.dial(addr) },
		Bandwidth: Unlimited, ConnRate: 1e6, ConnBurst: 1 << 20, RelayBuffer: budget, MaxConnsPerSandbox: conns,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln := ns.listen(t, "127.0.0.1:0")
	go p.Serve(ln)
	proxyPort := ln.Addr().(*net.TCPAddr).AddrPort().Port()
	policy := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{pypiIP.String()}, Ports: []uint16{dst.Port()}}
	un, err := p.Register(netip.MustParseAddr("127.0.0.1"), "sb", policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer un()

	var clients []net.Conn
	for range conns {
		c, err := ns.dial(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		dsts.slot(c.LocalAddr().String()) <- dst
		clients = append(clients, c)
	}
	// Wait until the server can send no more: every buffer on the way
	// is full.
	for last, still, deadline := int64(-1), 0, time.Now().Add(time.Minute); still < 5; {
		if time.Now().After(deadline) {
			t.Fatal("the server never stopped sending")
		}
		time.Sleep(200 * time.Millisecond)
		if n := sent.Load(); n != last {
			last, still = n, 0
		} else {
			still++
		}
	}
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
		sent.Load()>>20, relay>>10, relaySocks, client>>10, server>>10)
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
