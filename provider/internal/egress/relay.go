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
	setBuffers(up) // within the connection's floor, as the sandbox's side
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
		if err := p.copyDir(tc, dst, src, lim, &last); err != nil {
			discardUnsent(tc.Conn)
			discardUnsent(up)
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
	// What a peer never read would outlive the connection in the kernel
	// (an orphaned socket sending into a closed window), out of the
	// budget the connection gives back now: it is dropped.
	discardUnsent(tc.Conn)
	discardUnsent(up)
}

// copyDir copies src to dst and returns nil at src's end. Between two
// TCP connections it splices in the kernel through a pipe of the
// direction's own (relayDir): the bytes never enter the proxy, and what
// the direction may hold is within the sandbox's relay buffer budget.
// Otherwise it copies with io.CopyN. Each move is paid to the sandbox's
// bandwidth bucket once made, so the bound costs one wait per move, not
// a copy through a limiter. Only reads have a deadline (a write that
// times out in a splice loses the bytes in flight): a read that times
// out ends the copy if neither direction moved for the idle timeout,
// and a write the sandbox stalls is ended by the other direction's
// giving up.
func (p *Proxy) copyDir(tc *trackedConn, dst, src net.Conn, lim *rate.Limiter, last *atomic.Int64) error {
	if pd := newPipeDir(dst, src); pd != nil {
		defer pd.close()
		return p.relayDir(tc, pd, src, lim, last)
	}
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
			if werr := lim.WaitN(tc.ctx, int(n)); werr != nil {
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

// relayDir splices src to dst through pd. The direction's receive
// buffer (src's) starts at minRecvBuf, and its send buffer (dst's) and
// the most a move takes at a quarter of that (sendBuf), paid by the
// connection's floor. They double, up to maxRecvBuf, each time a move
// finds at least half of what it may take waiting: the sender is
// filling the window faster than the relay empties it, so a larger one
// would carry more. The receive buffer is the window the sender gets,
// which a long round trip needs large; the send buffer only has to
// carry the sandbox's side, a round trip of microseconds, between two
// moves. Each doubling is taken from the sandbox's budget first, and
// happens only if the budget has it; the pipe never holds more than a
// move. A direction whose receiver does not read fills its buffers and
// stops moving, and so stops growing.
func (p *Proxy) relayDir(tc *trackedConn, pd *pipeDir, src net.Conn, lim *rate.Limiter, last *atomic.Int64) error {
	idle := p.cfg.IdleTimeout
	size, held := minRecvBuf, dirCost(minRecvBuf, sendBuf(minRecvBuf))
	deadline := time.Now().Add(idle)
	_ = src.SetReadDeadline(deadline)
	for {
		most := min(sendBuf(size), pd.pipeCap)
		if lim.Limit() != rate.Inf {
			most = min(most, chunk)
		}
		n, err := pd.move(most)
		switch {
		case err == nil && n == 0:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			if next := time.Unix(0, last.Load()).Add(idle); time.Now().Before(next) {
				deadline = next
				_ = src.SetReadDeadline(deadline)
				continue
			}
			return err
		case err != nil:
			return err
		}
		now := time.Now()
		last.Store(now.UnixNano())
		// Push the deadline on only now and then: resetting the timer
		// at every move costs more than the move on a fast connection.
		if deadline.Sub(now) < idle-idle/8 {
			deadline = now.Add(idle)
			_ = src.SetReadDeadline(deadline)
		}
		if lim.Limit() != rate.Inf {
			if werr := lim.WaitN(tc.ctx, n); werr != nil {
				return werr
			}
		}
		if n >= most/2 && size < maxRecvBuf {
			size, held = tc.grow(pd, size, held)
		}
	}
}

// sendBuf is the size of a direction's send buffer, and the most a move
// takes, for a receive buffer of rcv.
func sendBuf(rcv int) int { return rcv / 4 }

// dirCost is what a direction of a receive buffer of rcv may hold: the
// receive buffer, the send buffer and the pipe.
func dirCost(rcv, pipeCap int) int64 {
	return int64(rcv + sendBuf(rcv) + min(sendBuf(rcv), pipeCap))
}

// connFloor is what a connection's two directions may hold at the
// smallest buffers: taken from the sandbox's budget when it is admitted.
const connFloor = 2 * (minRecvBuf + 2*minRecvBuf/4)

// grow doubles pd's buffers from a receive buffer of size, if the
// sandbox's budget has the bytes, and returns the direction's receive
// buffer size and what it holds of the budget.
func (tc *trackedConn) grow(pd *pipeDir, size int, held int64) (int, int64) {
	next := min(2*size, maxRecvBuf)
	want := dirCost(next, pd.pipeCap)
	tc.bufMu.Lock()
	defer tc.bufMu.Unlock()
	if tc.closed || !tc.sb.buf.growth.take(want-held) {
		return size, held
	}
	// The kernel may set less (past rmem_max without the privilege to
	// force it): the difference goes back.
	got := int64(setBuffer(pd.src, true, next)+setBuffer(pd.dst, false, sendBuf(next))) + int64(min(sendBuf(next), pd.pipeCap))
	got = max(min(got, want), held)
	tc.sb.buf.growth.give(want - got)
	tc.held += got - held
	return next, got
}
