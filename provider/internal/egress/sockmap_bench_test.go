//go:build linux

package egress

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

// These benchmarks measure the kernel's socket redirection (sockmap, an
// sk_skb stream verdict calling bpf_sk_redirect_map) as the relay of a
// download, against a direct connection and the proxy itself: the
// design docs/network.md ("Kernel redirection") weighs and does not
// adopt. They need root (CAP_BPF and CAP_NET_ADMIN).
//
// Each relay is the bare mechanism, with no decision: it accepts a
// connection, dials the server and puts the sockets in the maps. The
// relay "sockmap-egress" redirects what the server sends to the
// sandbox-side socket's sending, so the bytes cross no user space but
// still two TCP connections; "sockmap-ingress" queues them on the
// client's socket itself (BPF_F_INGRESS), so the second connection
// carries no data. Neither relay can forward the server's end of stream
// in order (BenchmarkSockmapEndOfStream), so for the others the client
// reads exactly benchSize bytes and the relay ends when the client
// closes.

// redirect is a one-socket sockmap whose stream verdict sends every
// chunk a socket in it receives to the socket in target, on target's
// receive queue if ingress, else out of it.
type redirect struct {
	in, target *ebpf.Map
}

func newRedirect(b *testing.B, ingress bool) *redirect {
	sockmap := func() *ebpf.Map {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.SockMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
		if err != nil {
			b.Fatalf("sockmap (root needed): %v", err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}
	r := &redirect{in: sockmap(), target: sockmap()}
	var flags int32
	if ingress {
		flags = 1 // BPF_F_INGRESS
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SkSKB, AttachType: ebpf.AttachSkSKBStreamVerdict, License: "GPL",
		Instructions: asm.Instructions{
			// return bpf_sk_redirect_map(skb, target, 0, flags)
			asm.LoadMapPtr(asm.R2, r.target.FD()),
			asm.Mov.Imm(asm.R3, 0),
			asm.Mov.Imm(asm.R4, flags),
			asm.FnSkRedirectMap.Call(),
			asm.Return(),
		},
	})
	if err != nil {
		b.Fatalf("stream verdict: %v", err)
	}
	b.Cleanup(func() { prog.Close() })
	if err := link.RawAttachProgram(link.RawAttachProgramOptions{Target: r.in.FD(), Program: prog, Attach: ebpf.AttachSkSKBStreamVerdict}); err != nil {
		b.Fatalf("attach stream verdict: %v", err)
	}
	return r
}

// put stores c's socket in m.
func put(m *ebpf.Map, c net.Conn) error {
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	var uerr error
	if err := rc.Control(func(fd uintptr) { uerr = m.Update(uint32(0), uint32(fd), ebpf.UpdateAny) }); err != nil {
		return err
	}
	if uerr != nil {
		return fmt.Errorf("sockmap update: %w", uerr)
	}
	return nil
}

// redirectRelay serves, one connection at a time, a relay to srv by r:
// the server's socket goes in r.in, and for egress the accepted socket
// in r.target (for ingress the client puts its own there). If atEnd,
// the relay half-closes toward the client once the server's end is
// read off its socket, as a relay must pass it on; else it waits for
// the client to close.
func redirectRelay(b *testing.B, srv string, r *redirect, ingress, atEnd bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			tc, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", srv)
			if err != nil {
				tc.Close()
				return
			}
			err = nil
			if !ingress {
				err = put(r.target, tc)
			}
			if err == nil {
				err = put(r.in, up)
			}
			if err != nil {
				b.Error(err)
			} else {
				done := make(chan struct{})
				go func() { _, _ = io.Copy(up, tc); close(done) }() // the request; ends once the client closes
				if atEnd {
					_, _ = io.Copy(io.Discard, up) // nothing but the end: every byte is redirected
					_ = tc.(*net.TCPConn).CloseWrite()
				}
				<-done
			}
			up.Close()
			tc.Close()
		}
	}()
	return ln.Addr().String()
}

// redirectPaths are the direct path, the proxy by name, and the two
// redirecting relays, which pass the server's end on if atEnd; rcvbuf, if not 0, is forced on the client's socket
// of the ingress relay (the only buffer its bytes wait in).
func redirectPaths(b *testing.B, srv net.Listener, rcvbuf int, atEnd bool) []benchPath {
	paths := benchPathsTo(b, srv)
	egress, ingress := newRedirect(b, false), newRedirect(b, true)
	viaEgress := redirectRelay(b, srv.Addr().String(), egress, false, atEnd)
	viaIngress := redirectRelay(b, srv.Addr().String(), ingress, true, atEnd)
	dial := func(b *testing.B, addr string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	return []benchPath{paths[0], paths[2],
		{"sockmap-egress", func(b *testing.B) net.Conn { return dial(b, viaEgress) }},
		{"sockmap-ingress", func(b *testing.B) net.Conn {
			c := dial(b, viaIngress)
			if rcvbuf > 0 {
				rc, _ := c.(*net.TCPConn).SyscallConn()
				_ = rc.Control(func(fd uintptr) {
					_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, rcvbuf)
				})
			}
			if err := put(ingress.target, c); err != nil {
				b.Fatal(err)
			}
			return c
		}},
	}
}

// BenchmarkSockmapDownload is BenchmarkDownload's loopback download
// over the redirecting relays, the client's receive buffer at its
// default and forced to 32 MiB.
func BenchmarkSockmapDownload(b *testing.B) {
	for _, rcvbuf := range []int{0, 32 << 20} {
		b.Run("rcvbuf="+map[int]string{0: "default", 32 << 20: "32MiB"}[rcvbuf], func(b *testing.B) {
			srv := benchServer(b, netip.AddrPortFrom(pypiIP, 0).String(), 0, nil)
			for _, path := range redirectPaths(b, srv, rcvbuf, false) {
				b.Run("path="+path.name, func(b *testing.B) {
					b.SetBytes(benchSize)
					cpu := cpuTime()
					for b.Loop() {
						c := path.dial(b)
						_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: bench.example\r\n\r\n")
						n, err := io.CopyN(io.Discard, c, benchSize)
						c.Close()
						if err != nil || n != benchSize {
							b.Fatalf("downloaded %d bytes, %v", n, err)
						}
					}
					b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
				})
			}
		})
	}
}

// BenchmarkSockmapUnread is a client that sends its request and reads
// nothing: it reports the MB the server sent before its writes stalled
// (for a second) or the download ended, which is what the host holds
// for a sandbox that does not read: the socket buffers on the way,
// direct and through the proxy; every byte with the redirecting relays,
// which open the server's window as they redirect.
func BenchmarkSockmapUnread(b *testing.B) {
	var sent atomic.Int64
	srv := benchServer(b, netip.AddrPortFrom(pypiIP, 0).String(), 0, &sent)
	for _, path := range redirectPaths(b, srv, 0, false) {
		b.Run("path="+path.name, func(b *testing.B) {
			var held int64
			for b.Loop() {
				sent.Store(0)
				held = 0
				c := path.dial(b)
				_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: bench.example\r\n\r\n")
				for last := int64(-1); held != last && held < benchSize; {
					last = held
					time.Sleep(time.Second) // a measurement's settle time, not a synchronisation
					held = sent.Load()
				}
				c.Close()
			}
			b.ReportMetric(float64(held)/(1<<20), "MB-held")
		})
	}
}

// BenchmarkSockmapEndOfStream is the download of BenchmarkSockmapDownload
// read to its end, through relays that pass the server's end on as
// soon as they read it: it reports the MB the client got before its end
// of stream, 100 when every byte arrived first. The redirected bytes
// are still queued in the kernel when the relay half-closes, and the
// client reads the end first.
func BenchmarkSockmapEndOfStream(b *testing.B) {
	srv := benchServer(b, netip.AddrPortFrom(pypiIP, 0).String(), 0, nil)
	for _, path := range redirectPaths(b, srv, 0, true) {
		b.Run("path="+path.name, func(b *testing.B) {
			var got int64
			for b.Loop() {
				c := path.dial(b)
				_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: bench.example\r\n\r\n")
				got, _ = io.Copy(io.Discard, c)
				c.Close()
			}
			b.ReportMetric(float64(got)/(1<<20), "MB-before-EOF")
		})
	}
}
