package egress

import (
	"io"
	"net"
	"net/netip"
	"testing"
)

const benchSize = 100 << 20

// benchServer writes benchSize bytes to each connection.
func benchServer(b *testing.B, addr string) net.Listener {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256<<10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for left := benchSize; left > 0; left -= len(buf) {
					if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
						return
					}
				}
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln
}

func download(b *testing.B, c net.Conn) {
	defer c.Close()
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != benchSize {
		b.Fatalf("downloaded %d bytes, %v", n, err)
	}
}

// BenchmarkDownload is a 100 MB download over loopback, direct and
// through the transparent proxy's relay (bandwidth bound off).
func BenchmarkDownload(b *testing.B) {
	srv := benchServer(b, "127.0.0.2:0")
	port := uint16(srv.Addr().(*net.TCPAddr).Port)
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(benchSize)
		for b.Loop() {
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			download(b, c)
		}
	})
	b.Run("proxy", func(b *testing.B) {
		res := newFakeResolver()
		res.set("bench.example", pypiIP)
		dsts := &dstTable{}
		p, err := New(Config{Resolver: res, Forbidden: loopbackAllowed(), OriginalDst: dsts.lookup,
			Bandwidth: Unlimited, ConnRate: 1e6, ConnBurst: 1 << 20, Logger: newTestLogger(io.Discard)})
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go p.Serve(ln)
		policy := (&world{p443: port, p80: port}).allow("bench.example")
		policy.CIDRs = []string{pypiIP.String()}
		un, err := p.Register(netip.MustParseAddr("127.0.0.1"), "bench", policy, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer un()
		b.SetBytes(benchSize)
		for b.Loop() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			// A server-first download to an address a CIDR rule allows:
			// the relay alone, no header to wait for.
			dsts.slot(c.LocalAddr().String()) <- netip.AddrPortFrom(pypiIP, port)
			download(b, c)
		}
	})
}
