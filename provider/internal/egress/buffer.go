package egress

import (
	"net"
	"sync"
)

// budgets are a sandbox's relay buffer budget (Config.RelayBuffer): the
// floors its connections start with (connFloor each, for as many as it
// may open), and what is left, which they grow into. Every byte a
// connection's buffers may hold is taken from them before the buffers
// are set that large, and given back when the connection ends, so that
// all of a sandbox's connections together never hold more than the
// budget, however many it opens and whether or not it reads; and the
// connections that grew first leave the floors of the others.
type budgets struct {
	floors, growth budget
}

func newBudgets(total int64, maxConns int) *budgets {
	floors := min(total, int64(maxConns)*connFloor)
	return &budgets{floors: budget{free: floors}, growth: budget{free: total - floors}}
}

// budget is bytes of a budget no connection holds.
type budget struct {
	mu   sync.Mutex
	free int64
}

// take takes n bytes, or nothing and false if fewer are free.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.free {
		return false
	}
	b.free -= n
	return true
}

// give gives n bytes back.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
}

// upstreamRecvBuf is the receive buffer of an upstream connection of a
// sandbox's HTTP client, which carries the connections the proxy
// terminates (to add credentials): fixed, rather than left to the
// kernel's autotuning (up to tcp_rmem's maximum, 6 MiB by default), so
// that a sandbox that stops reading a response leaves no more than this
// waiting for it. At a round trip of 50 ms it carries 20 MB/s.
const upstreamRecvBuf = 1 << 20

// bufferUpstream fixes the buffers of c, an upstream connection of the
// sandbox's HTTP client, and returns the connection to use in its place:
// upstreamRecvBuf to receive if the budget's growth has the bytes, which
// its close gives back, else the floor, which the sandbox-side
// connection's floor pays for.
func (sb *sandbox) bufferUpstream(c net.Conn) net.Conn {
	snd := sendBuf(minRecvBuf)
	cost := int64(upstreamRecvBuf + snd)
	if !sb.buf.growth.take(cost) {
		setConnBuffers(c, minRecvBuf, snd)
		return c
	}
	setConnBuffers(c, upstreamRecvBuf, snd)
	return &budgetedConn{Conn: c, give: sync.OnceFunc(func() { sb.buf.growth.give(cost) })}
}

// budgetedConn is a connection that holds bytes of a budget until it is
// closed.
type budgetedConn struct {
	net.Conn
	give func()
}

func (c *budgetedConn) Close() error {
	c.give()
	return c.Conn.Close()
}
