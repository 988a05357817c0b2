package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// route decides a connection and relays it. ip is where the sandbox sent
// it (transparent mode), given the name a CONNECT named (explicit mode),
// prefix bytes of it read already.
func (p *Proxy) route(tc *trackedConn, ip netip.Addr, port uint16, given string, prefix []byte) {
	sb := tc.sb
	name := given
	ipAllowed := given == "" && p.literalAllowed(sb, ip, port)
	// Peek only when a name is needed or a credential may apply, so that
	// a protocol whose server speaks first works to a CIDR rule's
	// addresses and to a name a CONNECT gave.
	needPeek := !ipAllowed && given == "" || given != "" && len(sb.credsFor(given, port)) > 0 ||
		ipAllowed && len(sb.creds) > 0
	var pk peeked
	pk.bytes = prefix
	if needPeek {
		pk = p.peek(tc.Conn, prefix)
		switch {
		case pk.err != nil && given == "" && !ipAllowed:
			p.refuse(sb, refused(ReasonHeader, ip.String()))
			_ = tc.Close()
			return
		case pk.name != "" && given != "" && !sameName(pk.name, given):
			p.refuse(sb, refused(ReasonMismatch, pk.name))
			_ = tc.Close()
			return
		case given == "":
			name = pk.name
		}
	}
	if name == "" {
		name = ip.String()
	}
	creds := sb.credsFor(name, port)
	if len(creds) > 0 && (pk.kind == kindTLS || pk.kind == kindHTTP) {
		if !sb.policy.AllowsHost(name, port) {
			p.refuse(sb, refused(ReasonHostNotAllowed, name))
			_ = tc.Close()
			return
		}
		if pk.kind == kindTLS {
			p.terminate(tc, pk.bytes, name, port)
		} else {
			p.serveInner(&flowConn{Conn: &replayConn{trackedConn: tc, prefix: pk.bytes}, f: &flow{sb: sb, name: name, port: port, scheme: "http"}})
		}
		return
	}
	addrs, r := p.decide(tc.ctx, sb, name, port)
	if r != nil && r.Reason == ReasonHostNotAllowed && ipAllowed {
		addrs, r = []netip.Addr{ip}, nil // the address is allowed whatever the name says
	}
	if r != nil {
		p.refuse(sb, r)
		_ = tc.Close()
		return
	}
	up, r := p.dial(tc.ctx, addrs, port, name)
	if r != nil {
		p.refuse(sb, r)
		_ = tc.Close()
		return
	}
	p.splice(tc, pk.bytes, up)
}

// splice relays bytes both ways between the sandbox's connection and up
// until both sides are done, the connection idles, or it is closed.
func (p *Proxy) splice(tc *trackedConn, prefix []byte, up net.Conn) {
	defer tc.Close()
	defer up.Close()
	stop := context.AfterFunc(tc.ctx, func() { _ = up.Close() })
	defer stop()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	if len(prefix) > 0 {
		_ = up.SetWriteDeadline(time.Now().Add(p.cfg.IdleTimeout))
		if _, err := up.Write(prefix); err != nil {
			return
		}
	}
	var wg sync.WaitGroup
	dir := func(dst, src net.Conn, lim *rate.Limiter) {
		defer wg.Done()
		if err := p.copyDir(tc.ctx, dst, src, lim, &last); err != nil {
			_ = tc.Conn.Close()
			_ = up.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	wg.Add(2)
	go dir(up, tc.Conn, tc.sb.up)
	dir(tc.Conn, up, tc.sb.down)
	wg.Wait()
}

// copyDir copies src to dst and returns nil at src's end. It moves a
// chunk at a time with io.CopyN, which between two TCP connections
// splices in the kernel (TCPConn.ReadFrom): the bytes never enter the
// proxy, and no buffer of its own is held per connection. Each chunk
// is paid to the sandbox's bandwidth bucket once moved, so the bound
// costs one wait per chunk, not a copy through a limiter. Only reads
// have a deadline (a write that times out in a splice loses the bytes
// in flight): a read that times out ends the copy if neither direction
// moved for the idle timeout, and a write the sandbox stalls is ended
// by the other direction's giving up.
func (p *Proxy) copyDir(ctx context.Context, dst, src net.Conn, lim *rate.Limiter, last *atomic.Int64) error {
	idle := p.cfg.IdleTimeout
	size := int64(chunk)
	if lim.Limit() == rate.Inf {
		size = unboundedChunk // fewer rounds: nothing to pay between them
	}
	for {
		_ = src.SetReadDeadline(time.Now().Add(idle))
		n, err := io.CopyN(dst, src, size)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if werr := lim.WaitN(ctx, int(n)); werr != nil {
				return werr
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, last.Load())) < idle:
		default:
			return err
		}
	}
}
