package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// kind is what a connection's first bytes are.
type kind int

const (
	kindOther kind = iota
	kindTLS
	kindHTTP
)

// peeked is what the proxy learnt from a connection's first header.
type peeked struct {
	kind  kind
	name  string // the server name or the Host, without a port; "" if none
	bytes []byte // every byte read, to be replayed
	err   error  // why no header was read in full
}

var (
	errHeaderTooLarge = errors.New("egress: first header too large")
	errPeeked         = errors.New("egress: client hello read")
)

// recorder reads from r, keeping every byte (at most max) so that the
// bytes can be read again from the start with rewind.
type recorder struct {
	r   io.Reader
	buf []byte
	pos int
	max int
}

func (r *recorder) Read(b []byte) (int, error) {
	if r.pos < len(r.buf) {
		n := copy(b, r.buf[r.pos:])
		r.pos += n
		return n, nil
	}
	room := r.max - len(r.buf)
	if room <= 0 {
		return 0, errHeaderTooLarge
	}
	if len(b) > room {
		b = b[:room]
	}
	n, err := r.r.Read(b)
	r.buf = append(r.buf, b[:n]...)
	r.pos += n
	return n, err
}

func (r *recorder) rewind() { r.pos = 0 }

// peek reads c's first header, a TLS ClientHello or an HTTP request's
// line and headers, within the header timeout and size, after prefix
// (bytes of c read already).
func (p *Proxy) peek(c net.Conn, prefix []byte) peeked {
	_ = c.SetReadDeadline(time.Now().Add(p.cfg.HeaderTimeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	rec := &recorder{r: c, buf: append([]byte(nil), prefix...), max: p.cfg.MaxHeaderBytes}
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return peeked{bytes: rec.buf, err: err}
	}
	rec.rewind()
	switch {
	case first[0] == 0x16: // a TLS handshake record
		name, err := clientHelloName(rec, c)
		return peeked{kind: kindTLS, name: name, bytes: rec.buf, err: err}
	case 'A' <= first[0] && first[0] <= 'Z': // an HTTP method
		req, err := http.ReadRequest(bufio.NewReaderSize(rec, 4096))
		if err != nil {
			return peeked{kind: kindOther, bytes: rec.buf, err: err}
		}
		// The body is not read (nor closed, which would read it): the
		// decision needs the headers only, and a client that sent
		// "Expect: 100-continue" waits for the server before sending it.
		return peeked{kind: kindHTTP, name: hostOnly(req.Host), bytes: rec.buf}
	}
	return peeked{bytes: rec.buf}
}

// clientHelloName parses a ClientHello with crypto/tls itself: a server
// handshake over a connection that reads the recorded bytes and writes
// nowhere, stopped as soon as the hello is parsed.
func clientHelloName(rec *recorder, c net.Conn) (string, error) {
	var name string
	var got bool
	srv := tls.Server(&peekConn{Conn: c, r: rec}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = h.ServerName, true
			return nil, errPeeked
		},
	})
	err := srv.Handshake()
	if got {
		return name, nil
	}
	return "", err
}

// peekConn reads from r and discards what is written, so that the
// handshake parsing a hello sends nothing to the sandbox.
type peekConn struct {
	net.Conn
	r io.Reader
}

func (c *peekConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *peekConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *peekConn) Close() error                     { return nil }
func (c *peekConn) SetDeadline(time.Time) error      { return nil }
func (c *peekConn) SetReadDeadline(time.Time) error  { return nil }
func (c *peekConn) SetWriteDeadline(time.Time) error { return nil }

// hostOnly is a Host's name without its port.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// replayConn reads prefix, then the connection.
type replayConn struct {
	*trackedConn
	prefix []byte
}

func (c *replayConn) Read(b []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(b, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.trackedConn.Read(b)
}
