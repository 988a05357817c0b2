package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// flow is a connection the proxy reads requests on, to add credentials
// (and to check every request's host, in explicit mode).
type flow struct {
	sb     *sandbox
	tc     *trackedConn
	name   string // the name every request must be for; "" in explicit mode
	port   uint16
	scheme string
}

// flowConn carries its flow to the HTTP server's handler.
type flowConn struct {
	net.Conn
	f *flow
}

type flowKey struct{}

func flowContext(ctx context.Context, c net.Conn) context.Context {
	switch c := c.(type) {
	case *flowConn:
		return context.WithValue(ctx, flowKey{}, c.f)
	case *trackedConn:
		return context.WithValue(ctx, flowKey{}, &flow{sb: c.sb, tc: c})
	}
	return ctx
}

func flowOf(ctx context.Context) *flow {
	f, _ := ctx.Value(flowKey{}).(*flow)
	return f
}

// credsFor are the credentials of sb that apply to name on port.
func (sb *sandbox) credsFor(name string, port uint16) []Credential {
	if _, ok := literal(name); ok {
		return nil
	}
	var out []Credential
	for _, c := range sb.creds {
		if c.matches(name, port) {
			out = append(out, c)
		}
	}
	return out
}

// terminate completes the sandbox's TLS handshake with a certificate for
// name from the proxy's authority, and serves the requests inside.
func (p *Proxy) terminate(tc *trackedConn, hello []byte, name string, port uint16) {
	srv := tls.Server(&replayConn{trackedConn: tc, prefix: hello}, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.ca.leaf(name, time.Now()) },
		NextProtos:     []string{"http/1.1"},
		MinVersion:     tls.VersionTLS12,
	})
	_ = tc.Conn.SetDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	err := srv.HandshakeContext(tc.ctx)
	_ = tc.Conn.SetDeadline(time.Time{})
	if err != nil {
		p.refuse(tc.sb, refused(ReasonHeader, name))
		_ = tc.Close()
		return
	}
	p.serveInner(&flowConn{Conn: srv, f: &flow{sb: tc.sb, tc: tc, name: name, port: port, scheme: "https"}})
}

// serveInner hands a connection to the proxy's HTTP server.
func (p *Proxy) serveInner(fc *flowConn) {
	if !p.innerLn.push(fc) {
		_ = fc.Close()
	}
}

// forward relays a request read on a flow, to the flow's name only.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	f := flowOf(r.Context())
	if f == nil {
		http.Error(w, "egress: no sandbox", http.StatusForbidden)
		return
	}
	if !sameName(hostOnly(r.Host), f.name) {
		rf := refused(ReasonMismatch, hostOnly(r.Host))
		p.refuse(f.sb, rf)
		http.Error(w, rf.Error(), http.StatusMisdirectedRequest)
		return
	}
	p.relay(w, r, f.sb, f.scheme, f.name, f.port)
}

// relay sends r to scheme://name:port through the sandbox's transport,
// whose every dial is decided, with the sandbox's credentials for name.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request, sb *sandbox, scheme, name string, port uint16) {
	creds := sb.credsFor(name, port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = net.JoinHostPort(name, strconv.Itoa(int(port)))
			pr.Out.Host = r.Host
			if pr.Out.Host == "" || r.URL.IsAbs() {
				pr.Out.Host = r.URL.Host
			}
			pr.Out.Header.Del("Proxy-Authorization")
			pr.Out.Header.Del("Proxy-Connection")
			for _, c := range creds {
				pr.Out.Header.Set(c.Header, c.Value)
			}
		},
		Transport: sb.transport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if rf, ok := errors.AsType[*Refusal](err); ok {
				http.Error(w, rf.Error(), http.StatusForbidden)
				return
			}
			if r.Context().Err() == nil {
				p.log.Debug("egress: upstream failed", "sandbox", sb.id, "name", truncate(name), "err", err)
			}
			http.Error(w, "egress: upstream failed", http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(w, r)
}

// newTransport is a sandbox's HTTP client side: its own, so that a
// connection one sandbox's policy allowed is never reused for another's.
func (p *Proxy) newTransport(sb *sandbox) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			c, err := p.dialChecked(ctx, sb, addr)
			if err != nil {
				return nil, err
			}
			return sb.bufferUpstream(c), nil
		},
		TLSClientConfig:        &tls.Config{RootCAs: p.cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    p.cfg.DialTimeout,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    4,
		MaxConnsPerHost:        p.cfg.MaxConnsPerSandbox,
		IdleConnTimeout:        p.cfg.IdleTimeout,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// serveExplicit is the explicit mode's handler: CONNECT, and
// absolute-form plain HTTP requests.
func (p *Proxy) serveExplicit(w http.ResponseWriter, r *http.Request) {
	f := flowOf(r.Context())
	if f == nil {
		http.Error(w, "egress: no sandbox", http.StatusForbidden)
		return
	}
	sb := f.sb
	if r.Method == http.MethodConnect {
		p.connect(w, r, f)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" || r.URL.Host == "" {
		rf := refused(ReasonBadRequest, r.URL.Host)
		p.refuse(sb, rf)
		http.Error(w, "egress: a proxy request is CONNECT or an absolute http:// URL", http.StatusBadRequest)
		return
	}
	name := r.URL.Hostname()
	port := uint16(80)
	if ps := r.URL.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			http.Error(w, "egress: bad port", http.StatusBadRequest)
			return
		}
		port = uint16(n)
	}
	if r.Host != "" && !sameName(hostOnly(r.Host), name) {
		rf := refused(ReasonMismatch, hostOnly(r.Host))
		p.refuse(sb, rf)
		http.Error(w, rf.Error(), http.StatusMisdirectedRequest)
		return
	}
	if rf := p.allowed(sb, name, port); rf != nil {
		p.refuse(sb, rf)
		http.Error(w, rf.Error(), http.StatusForbidden)
		return
	}
	p.relay(w, r, sb, "http", name, port)
}

// allowed is the policy's answer for name on port, before any lookup.
func (p *Proxy) allowed(sb *sandbox, name string, port uint16) *Refusal {
	if a, ok := literal(name); ok {
		if !p.literalAllowed(sb, a, port) {
			return refused(ReasonNoName, name)
		}
		return nil
	}
	if !sb.policy.AllowsHost(name, port) {
		return refused(ReasonHostNotAllowed, name)
	}
	return nil
}

// connect answers a CONNECT: decided and dialed before the sandbox is
// told 200, then relayed, or terminated when a credential applies.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, f *flow) {
	sb := f.sb
	host, ps, err := net.SplitHostPort(r.Host)
	n, perr := strconv.ParseUint(ps, 10, 16)
	if err != nil || perr != nil || n == 0 || host == "" {
		rf := refused(ReasonBadRequest, r.Host)
		p.refuse(sb, rf)
		http.Error(w, "egress: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	port := uint16(n)
	if rf := p.allowed(sb, host, port); rf != nil {
		p.refuse(sb, rf)
		http.Error(w, rf.Error(), http.StatusForbidden)
		return
	}
	var up net.Conn
	if len(sb.credsFor(host, port)) == 0 {
		addrs, rf := p.decide(r.Context(), sb, host, port)
		if rf == nil {
			up, rf = p.dial(r.Context(), addrs, port, host)
		}
		if rf != nil {
			p.refuse(sb, rf)
			code := http.StatusForbidden
			if rf.Reason == ReasonDial {
				code = http.StatusBadGateway
			}
			http.Error(w, rf.Error(), code)
			return
		}
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		if up != nil {
			_ = up.Close()
		}
		http.Error(w, "egress: cannot take the connection", http.StatusInternalServerError)
		return
	}
	tc := f.tc
	_ = tc.Conn.SetDeadline(time.Time{})
	var prefix []byte
	if k := brw.Reader.Buffered(); k > 0 {
		prefix, _ = brw.Reader.Peek(k)
		prefix = append([]byte(nil), prefix...)
	}
	_ = tc.Conn.SetWriteDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	_, err = conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	_ = tc.Conn.SetWriteDeadline(time.Time{})
	if err != nil {
		if up != nil {
			_ = up.Close()
		}
		_ = tc.Close()
		return
	}
	if up != nil {
		go p.splice(tc, prefix, up)
		return
	}
	go p.route(tc, netip.Addr{}, port, host, prefix)
}

// chanListener is the proxy's HTTP server's listener: the connections
// the proxy hands it, one by one.
type chanListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener() *chanListener {
	return &chanListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }
