package daytonafake

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// PreviewTokenHeader carries a preview's token, as GET
// /sandbox/{id}/ports/{port}/preview-url answers it.
const PreviewTokenHeader = "X-Daytona-Preview-Token"

// servePreview is Daytona's preview proxy at
// <URL>/preview/<id>/<port>/<path>: it forwards the request, as <path>,
// to the port of the sandbox's machine, streaming both ways. A private
// sandbox's previews need its token in PreviewTokenHeader.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
	s.count("preview")
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/preview/"), "/", 3)
	if len(parts) < 2 {
		writeToolboxError(w, r, http.StatusBadRequest, "target port is required")
		return
	}
	id := parts[0]
	port, err := strconv.Atoi(parts[1])
	if err != nil || port < 1 || port > 65535 {
		writeToolboxError(w, r, http.StatusBadRequest, "failed to parse target port")
		return
	}
	f := s.fault("preview", r)
	if f != nil && !f.Drop {
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		writeToolboxError(w, r, f.Status, http.StatusText(f.Status))
		return
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	switch {
	case sb == nil:
		s.mu.Unlock()
		writeToolboxError(w, r, http.StatusNotFound, "Sandbox with ID "+id+" not found")
		return
	case !sb.public && r.Header.Get(PreviewTokenHeader) != sb.previewToken:
		s.mu.Unlock()
		writeToolboxError(w, r, http.StatusUnauthorized, "Unauthorized: a preview of a private sandbox needs its token in "+PreviewTokenHeader)
		return
	case sb.state != stateStarted || sb.machine == nil:
		s.mu.Unlock()
		writeToolboxError(w, r, http.StatusBadRequest, "no IP address found. Is the Sandbox started?")
		return
	}
	// A request in flight is activity, as the proxy's polling makes it.
	sb.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		sb.inflight--
		sb.activity = time.Now()
		s.mu.Unlock()
	}()
	out := r.Clone(r.Context())
	out.URL.Path = "/"
	if len(parts) == 3 {
		out.URL.Path += parts[2]
	}
	out.URL.RawPath = ""
	out.Header.Del(PreviewTokenHeader)
	if f != nil {
		// Handled in full, its answer lost.
		s.forward(httptest.NewRecorder(), out, sb, port)
		dropConn(w)
		return
	}
	s.forward(w, out, sb, port)
}

// forward proxies r to port of sb's machine.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, sb *sandbox, port int) {
	// A request's body and its answer may flow at once (a command's
	// input and its output): HTTP/1.1 needs asking for it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	// An answer may end before its request's body does (the server
	// refusing it at once): the transport goes on reading that body
	// after the handler returns, and the server must then not read the
	// connection's next request at the same time. Such an answer closes
	// its connection.
	body := &trackedBody{ReadCloser: r.Body}
	r.Body = body
	closeUnlessRead := func(h http.Header) {
		if !body.done.Load() {
			h.Set("Connection", "close")
		}
	}
	s.mu.Lock()
	m := sb.machine
	s.mu.Unlock()
	rp := &httputil.ReverseProxy{
		ModifyResponse: func(resp *http.Response) error {
			closeUnlessRead(resp.Header)
			return nil
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "127.0.0.1:" + strconv.Itoa(port)
			pr.Out.Host = pr.Out.URL.Host
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := m.Dial(ctx, port)
				if err != nil {
					return nil, err
				}
				return sb.track(c), nil
			},
			DisableKeepAlives: true,
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			closeUnlessRead(w.Header())
			s.log.Debug("daytonafake: preview", "sandbox", sb.id, "port", port, "err", err)
			writeToolboxError(w, r, http.StatusBadGateway, "failed to proxy request: port "+strconv.Itoa(port)+" of the sandbox is not open")
		},
	}
	rp.ServeHTTP(w, r)
}

// trackedBody is a request body that says whether it was read to its end.
type trackedBody struct {
	io.ReadCloser
	done atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.done.Store(true)
	}
	return n, err
}

// trackedConn is a connection into a sandbox, closed when the sandbox
// stops or ends: a connection into a network namespace whose processes
// are gone would hang.
type trackedConn struct {
	net.Conn
	sb   *sandbox
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.sb.connMu.Lock()
		delete(c.sb.conns, c)
		c.sb.connMu.Unlock()
	})
	return c.Conn.Close()
}

// track registers c with the sandbox, or closes it if the sandbox is
// stopping.
func (sb *sandbox) track(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, sb: sb}
	sb.connMu.Lock()
	defer sb.connMu.Unlock()
	if sb.connsClosed {
		c.Close()
		return tc
	}
	if sb.conns == nil {
		sb.conns = map[*trackedConn]bool{}
	}
	sb.conns[tc] = true
	return tc
}

// closeConns closes every connection into the sandbox, and any made
// until it starts again.
func (sb *sandbox) closeConns() {
	sb.connMu.Lock()
	conns := sb.conns
	sb.conns, sb.connsClosed = nil, true
	sb.connMu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}
