package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"golang.org/x/time/rate"
)

// The benchmarks compare a direct connection with the same connection
// through the transparent proxy, in one run: see docs/network.md
// ("Performance") for the command and the figures.

const benchSize = 100 << 20

// benchServer answers each connection's request: /big with benchSize
// bytes (raw, after the request, until the connection closes), at pace
// bytes per second if pace > 0, anything else with a small HTTP
// response. It adds the bytes it sends to sent if not nil.
func benchServer(b *testing.B, addr string, pace int64, sent *atomic.Int64) net.Listener {
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
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				if req.URL.Path != "/big" {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
					return
				}
				link := rate.NewLimiter(rate.Limit(pace), len(buf))
				if pace <= 0 {
					link.SetLimit(rate.Inf)
				}
				for left := benchSize; left > 0; left -= len(buf) {
					n := min(left, len(buf))
					if err := link.WaitN(context.Background(), n); err != nil {
						return
					}
					m, err := c.Write(buf[:n])
					if sent != nil {
						sent.Add(int64(m))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	b.Cleanup(func() { ln.Close() })
	return ln
}

// benchPath is one way to reach the bench server: dial returns a
// connection on which a request to the server may be written.
type benchPath struct {
	name string
	dial func(b *testing.B) net.Conn
}

// benchPaths are the direct path and the proxy's: by a CIDR rule (the
// relay alone: no header is read), by name (the Host is read, resolved
// and dialed, then the relay), and by name under a bandwidth bound high
// enough not to slow the download (the accounting's own cost).
func benchPaths(b *testing.B, pace int64) []benchPath {
	return benchPathsTo(b, benchServer(b, netip.AddrPortFrom(pypiIP, 0).String(), pace, nil))
}

// benchPathsTo are benchPaths to the server srv.
func benchPathsTo(b *testing.B, srv net.Listener) []benchPath {
	port := uint16(srv.Addr().(*net.TCPAddr).Port)
	dst := netip.AddrPortFrom(pypiIP, port)
	byName := (&world{p443: port, p80: port}).allow("bench.example")
	byCIDR := byName
	byCIDR.CIDRs = []string{pypiIP.String()}
	through := func(bandwidth int64, policy provider.Network) func(b *testing.B) net.Conn {
		addr, dsts := benchProxy(b, bandwidth, policy)
		return func(b *testing.B) net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			dsts.slot(c.LocalAddr().String()) <- dst
			return c
		}
	}
	return []benchPath{
		{"direct", func(b *testing.B) net.Conn {
			c, err := net.Dial("tcp", dst.String())
			if err != nil {
				b.Fatal(err)
			}
			return c
		}},
		{"proxy-cidr", through(Unlimited, byCIDR)},
		{"proxy-name", through(Unlimited, byName)},
		{"proxy-name-bounded", through(64<<30, byName)},
	}
}

// benchProxy starts a proxy serving transparent connections from
// 127.0.0.1 under policy, and returns its listener's address and the
// table the dialer fills with each connection's original destination.
func benchProxy(b *testing.B, bandwidth int64, policy provider.Network) (string, *dstTable) {
	res := newFakeResolver()
	res.set("bench.example", pypiIP)
	dsts := &dstTable{}
	p, err := New(Config{Resolver: res, Forbidden: loopbackAllowed(), OriginalDst: dsts.lookup,
		Bandwidth: bandwidth, ConnRate: 1e6, ConnBurst: 1 << 20, Logger: newTestLogger(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	un, err := p.Register(netip.MustParseAddr("127.0.0.1"), "bench", policy, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(un)
	return ln.Addr().String(), dsts
}

// cpuTime is the process's user and system time so far: the client's,
// the server's and the proxy's, which share the process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDownload is a 100 MB download over loopback (the client
// reads with io.Copy), direct and through the proxy, as fast as the
// machine goes ("link=loopback"), and from a server that sends at
// 1 Gbit/s ("link=1Gbit"), as a fast link to the internet would.
// Besides the time it reports cpu-ms/op, the CPU the process (client,
// server and proxy) spent per download: on a shared machine the less
// noisy figure.
func BenchmarkDownload(b *testing.B) {
	b.Run("link=loopback", func(b *testing.B) { benchDownload(b, 0) })
	b.Run("link=1Gbit", func(b *testing.B) { benchDownload(b, 1e9/8) })
}

func benchDownload(b *testing.B, pace int64) {
	for _, path := range benchPaths(b, pace) {
		b.Run("path="+path.name, func(b *testing.B) {
			b.SetBytes(benchSize)
			cpu := cpuTime()
			for b.Loop() {
				c := path.dial(b)
				io.WriteString(c, "GET /big HTTP/1.1\r\nHost: bench.example\r\n\r\n")
				n, err := io.Copy(io.Discard, c)
				c.Close()
				if err != nil || n != benchSize {
					b.Fatalf("downloaded %d bytes, %v", n, err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkFirstByte is the time from dialing to the first byte of a
// small HTTP response, direct and through the proxy: the proxy's added
// latency (an accept, a header read, a lookup on a resolver that answers
// at once, a dial, the relay's start).
func BenchmarkFirstByte(b *testing.B) {
	for _, path := range benchPaths(b, 0) {
		b.Run("path="+path.name, func(b *testing.B) {
			var one [1]byte
			for b.Loop() {
				c := path.dial(b)
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: bench.example\r\n\r\n")
				if _, err := io.ReadFull(c, one[:]); err != nil {
					b.Fatal(fmt.Errorf("first byte: %w", err))
				}
				c.Close()
			}
		})
	}
}
