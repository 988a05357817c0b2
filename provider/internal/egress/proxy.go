package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"golang.org/x/time/rate"
)

// ErrClosed is returned by Serve and ServeExplicit once the proxy is closed.
var ErrClosed = errors.New("egress proxy closed")

// Proxy decides and relays sandboxes' outbound connections. Make one with
// New; it is safe for concurrent use.
type Proxy struct {
	cfg   Config
	log   *slog.Logger
	ca    *authority
	stats *counters
	hosts *hostAddrs

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu        sync.Mutex
	sandboxes map[netip.Addr]*sandbox
	total     int
	listeners map[net.Listener]struct{}
	closed    bool

	inner    *http.Server // serves the connections the proxy decrypts or reads requests of
	innerLn  *chanListener
	explicit *http.Server
}

// sandbox is one registered source.
type sandbox struct {
	id        string
	src       netip.Addr
	policy    provider.Network
	creds     []Credential
	connRate  *rate.Limiter
	up, down  *rate.Limiter // bytes from and to the sandbox
	buf       *budgets      // its relay buffer budget's free bytes
	transport *http.Transport
	conns     map[*trackedConn]struct{} // under Proxy.mu
}

// New makes a proxy; it serves nothing until Serve or ServeExplicit.
func New(cfg Config) (*Proxy, error) {
	cfg = cfg.withDefaults()
	ca, err := openAuthority(cfg.CAFile, time.Now(), cfg.Logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		cfg: cfg, log: cfg.Logger, ca: ca, stats: newCounters(),
		hosts: newHostAddrs(cfg.HostAddrs),
		ctx:   ctx, cancel: cancel,
		sandboxes: map[netip.Addr]*sandbox{},
		listeners: map[net.Listener]struct{}{},
		innerLn:   newChanListener(),
	}
	errLog := slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.inner = &http.Server{
		Handler:           http.HandlerFunc(p.forward),
		ReadHeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnContext:       flowContext,
		ErrorLog:          errLog,
	}
	p.explicit = &http.Server{
		Handler:           http.HandlerFunc(p.serveExplicit),
		ReadHeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnContext:       flowContext,
		ErrorLog:          errLog,
	}
	go func() { _ = p.inner.Serve(p.innerLn) }()
	return p, nil
}

// Register admits connections from src as the sandbox sandboxID's, under
// policy, with creds added to its requests. Unregister ends the sandbox's
// connections and forgets it; it is idempotent. A source registered
// already is refused (errdefs.ErrAlreadyExists), as is a policy or a
// credential that is not valid (errdefs.ErrBadInput).
func (p *Proxy) Register(src netip.Addr, sandboxID string, policy provider.Network, creds []Credential) (unregister func(), err error) {
	src = src.Unmap()
	if !src.IsValid() {
		return nil, fmt.Errorf("%w: egress: sandbox %q: no source address", errdefs.ErrBadInput, sandboxID)
	}
	if err := policy.Validate(); err != nil {
		return nil, fmt.Errorf("egress: sandbox %q: %w", sandboxID, err)
	}
	if len(creds) > MaxCredentials {
		return nil, fmt.Errorf("%w: egress: sandbox %q: %d credentials, more than %d", errdefs.ErrBadInput, sandboxID, len(creds), MaxCredentials)
	}
	for _, c := range creds {
		if err := c.validate(); err != nil {
			return nil, fmt.Errorf("egress: sandbox %q: %w", sandboxID, err)
		}
	}
	bw := rate.Limit(p.cfg.Bandwidth)
	if p.cfg.Bandwidth < 0 {
		bw = rate.Inf
	}
	sb := &sandbox{
		id: sandboxID, src: src, policy: policy, creds: append([]Credential(nil), creds...),
		connRate: rate.NewLimiter(rate.Limit(p.cfg.ConnRate), p.cfg.ConnBurst),
		up:       rate.NewLimiter(bw, chunk),
		down:     rate.NewLimiter(bw, chunk),
		conns:    map[*trackedConn]struct{}{},
		buf:      newBudgets(p.cfg.RelayBuffer, p.cfg.MaxConnsPerSandbox),
	}
	sb.transport = p.newTransport(sb)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if other, ok := p.sandboxes[src]; ok {
		return nil, fmt.Errorf("%w: egress: source %s is sandbox %q's already", errdefs.ErrAlreadyExists, src, other.id)
	}
	p.sandboxes[src] = sb
	var once sync.Once
	return func() { once.Do(func() { p.unregister(sb) }) }, nil
}

func (p *Proxy) unregister(sb *sandbox) {
	p.mu.Lock()
	if p.sandboxes[sb.src] == sb {
		delete(p.sandboxes, sb.src)
	}
	conns := make([]*trackedConn, 0, len(sb.conns))
	for c := range sb.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	sb.transport.CloseIdleConnections()
}

// Serve relays the connections ln accepts, which the kernel redirected
// from sandboxes, until ln fails or the proxy is closed; the proxy's
// Close closes ln, as does a Serve after Close.
func (p *Proxy) Serve(ln net.Listener) error {
	return p.acceptLoop(ln, func(tc *trackedConn) {
		dst, err := p.cfg.OriginalDst(tc.Conn)
		if err != nil {
			p.log.Warn("egress: no original destination", "sandbox", tc.sb.id, "err", err)
			_ = tc.Close()
			return
		}
		p.route(tc, dst.Addr().Unmap(), dst.Port(), "", nil)
	})
}

// ServeExplicit serves ln as an HTTP proxy (CONNECT and absolute-form
// requests) to sandboxes, until ln fails or the proxy is closed.
func (p *Proxy) ServeExplicit(ln net.Listener) error {
	tl := &trackingListener{Listener: ln, p: p}
	if !p.addListener(ln) {
		return ErrClosed
	}
	defer p.removeListener(ln)
	err := p.explicit.Serve(tl)
	if p.ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
		return ErrClosed
	}
	return err
}

func (p *Proxy) acceptLoop(ln net.Listener, handle func(*trackedConn)) error {
	if !p.addListener(ln) {
		return ErrClosed
	}
	defer p.removeListener(ln)
	tl := &trackingListener{Listener: ln, p: p}
	for {
		tc, err := tl.accept()
		if err != nil {
			if p.ctx.Err() != nil {
				return ErrClosed
			}
			return err
		}
		go handle(tc)
	}
}

// addListener tracks ln for Close, or closes it if the proxy is closed
// already: a Serve that starts after Close must not leave ln open.
func (p *Proxy) addListener(ln net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = ln.Close()
		return false
	}
	p.listeners[ln] = struct{}{}
	return true
}

func (p *Proxy) removeListener(ln net.Listener) {
	p.mu.Lock()
	delete(p.listeners, ln)
	p.mu.Unlock()
}

// Close stops serving, closes the listeners given to Serve and
// ServeExplicit, and ends every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.cancel()
	var sbs []*sandbox
	for _, sb := range p.sandboxes {
		sbs = append(sbs, sb)
	}
	for ln := range p.listeners {
		_ = ln.Close()
	}
	p.mu.Unlock()
	for _, sb := range sbs {
		p.unregister(sb)
	}
	_ = p.explicit.Close()
	_ = p.inner.Close()
	return nil
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	s := Stats{Accepted: p.stats.accepted.Load(), Refused: map[Reason]uint64{}}
	for r, n := range p.stats.refused {
		if v := n.Load(); v > 0 {
			s.Refused[r] = v
		}
	}
	p.mu.Lock()
	s.Active = p.total
	p.mu.Unlock()
	return s
}

// refuse counts and logs a refusal.
func (p *Proxy) refuse(sb *sandbox, r *Refusal) {
	p.stats.refused[r.Reason].Add(1)
	id := ""
	if sb != nil {
		id = sb.id
	}
	p.log.Debug("egress: refused", "sandbox", id, "name", truncate(r.Name), "reason", string(r.Reason))
}

// admit takes a connection from src, or refuses it.
func (p *Proxy) admit(c net.Conn) (*trackedConn, *sandbox, *Refusal) {
	var src netip.Addr
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		src = a.AddrPort().Addr().Unmap()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	sb := p.sandboxes[src]
	switch {
	case sb == nil || p.closed:
		return nil, nil, refused(ReasonUnknownSource, src.String())
	case p.total >= p.cfg.MaxConns:
		return nil, sb, refused(ReasonTotalConns, "")
	case len(sb.conns) >= p.cfg.MaxConnsPerSandbox:
		return nil, sb, refused(ReasonSandboxConns, "")
	case !sb.connRate.Allow():
		return nil, sb, refused(ReasonConnRate, "")
	case !sb.buf.floors.take(connFloor):
		return nil, sb, refused(ReasonRelayBuffer, "")
	}
	// The sandbox's side starts at the smallest buffers, before the
	// sandbox can fill them: the relay grows them as it moves bytes.
	setBuffers(c)
	ctx, cancel := context.WithCancel(p.ctx)
	tc := &trackedConn{Conn: c, p: p, sb: sb, ctx: ctx, cancel: cancel, held: connFloor}
	sb.conns[tc] = struct{}{}
	p.total++
	p.stats.accepted.Add(1)
	return tc, sb, nil
}

func truncate(s string) string {
	if len(s) > 253 {
		return s[:253]
	}
	return s
}

// trackedConn is a sandbox's connection, counted while open. Its Read
// and Write are bounded by the sandbox's bandwidth; the relay reads the
// bare Conn and accounts for itself.
type trackedConn struct {
	net.Conn
	p      *Proxy
	sb     *sandbox
	ctx    context.Context // cancelled when the connection closes
	cancel context.CancelFunc
	once   sync.Once

	bufMu  sync.Mutex
	held   int64 // of the sandbox's relay buffer budget
	closed bool
}

func (c *trackedConn) Read(b []byte) (int, error) {
	if len(b) > chunk {
		b = b[:chunk]
	}
	n, err := c.Conn.Read(b)
	if n > 0 {
		if werr := c.sb.up.WaitN(c.ctx, n); werr != nil && err == nil {
			err = net.ErrClosed
		}
	}
	return n, err
}

func (c *trackedConn) Write(b []byte) (int, error) {
	var done int
	for len(b) > 0 {
		n := min(len(b), chunk)
		if err := c.sb.down.WaitN(c.ctx, n); err != nil {
			return done, net.ErrClosed
		}
		m, err := c.Conn.Write(b[:n])
		done += m
		if err != nil {
			return done, err
		}
		b = b[n:]
	}
	return done, nil
}

func (c *trackedConn) Close() error {
	var err error
	c.once.Do(func() {
		c.cancel()
		err = c.Conn.Close()
		c.bufMu.Lock()
		c.closed = true
		c.sb.buf.floors.give(connFloor)
		c.sb.buf.growth.give(c.held - connFloor)
		c.held = 0
		c.bufMu.Unlock()
		c.p.mu.Lock()
		delete(c.sb.conns, c)
		c.p.total--
		c.p.mu.Unlock()
	})
	return err
}

// trackingListener admits the connections of registered sandboxes and
// closes the rest.
type trackingListener struct {
	net.Listener
	p *Proxy
}

func (l *trackingListener) Accept() (net.Conn, error) { return l.accept() }

func (l *trackingListener) accept() (*trackedConn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || transientAccept(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.p.ctx.Done():
				}
			}
			return nil, err
		}
		delay = 0
		tc, sb, r := l.p.admit(c)
		if r != nil {
			l.p.refuse(sb, r)
			_ = c.Close()
			continue
		}
		return tc, nil
	}
}

// transientAccept reports whether an accept failed for want of a
// resource the host may have again soon, so that the loop waits rather
// than stops.
func transientAccept(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
