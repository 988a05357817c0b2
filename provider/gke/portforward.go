package gke

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// The port forward's protocol and stream headers (k8s.io/api/core/v1's
// StreamType, PortHeader, PortForwardRequestIDHeader).
const (
	portForwardProtocol = "portforward.k8s.io"
	headerStreamType    = "streamType"
	headerPort          = "port"
	headerRequestID     = "requestID"
)

// portForward dials a pod's port through the API server's port forward
// (SPDY, as client-go's portforward package does), one connection of
// the API server per connection dialed, so that the daemon's HTTP
// client keeps each alive as it would a TCP connection.
type portForward struct {
	rest     *rest.Config
	rt       http.RoundTripper
	upgrader spdy.Upgrader
	ids      atomic.Int64
}

func newPortForward(rc *rest.Config) (*portForward, error) {
	rt, up, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, err
	}
	return &portForward{rest: rc, rt: rt, upgrader: up}, nil
}

// transport is an HTTP transport whose connections reach port of pod.
func (p *portForward) transport(ns, pod string, port int) http.RoundTripper {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.dial(ctx, ns, pod, port)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}

func (p *portForward) dial(ctx context.Context, ns, pod string, port int) (net.Conn, error) {
	u, err := url.Parse(p.rest.Host)
	if err != nil {
		return nil, err
	}
	u.Path = fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/portforward", u.Path, ns, pod)
	type result struct {
		c   httpstream.Connection
		err error
	}
	done := make(chan result, 1)
	go func() {
		d := spdy.NewDialerForStreaming(p.upgrader, &http.Client{Transport: p.rt}, http.MethodPost, u)
		c, proto, err := d.Dial(portForwardProtocol)
		if err == nil && proto != portForwardProtocol {
			c.Close()
			err = fmt.Errorf("port forward: the server speaks %q", proto)
		}
		done <- result{c, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
	if r.err != nil {
		return nil, fmt.Errorf("port forward to %s/%s: %w", ns, pod, r.err)
	}
	id := strconv.FormatInt(p.ids.Add(1), 10)
	h := http.Header{}
	h.Set(headerStreamType, "error")
	h.Set(headerPort, strconv.Itoa(port))
	h.Set(headerRequestID, id)
	errStream, err := r.c.CreateStream(h)
	if err != nil {
		r.c.Close()
		return nil, fmt.Errorf("port forward to %s/%s: %w", ns, pod, err)
	}
	errStream.Close() // the client writes nothing on it
	h.Set(headerStreamType, "data")
	data, err := r.c.CreateStream(h)
	if err != nil {
		r.c.Close()
		return nil, fmt.Errorf("port forward to %s/%s: %w", ns, pod, err)
	}
	c := &streamConn{conn: r.c, data: data}
	go func() {
		// The kubelet's word, when the pod's port cannot be reached: the
		// connection then ends.
		msg, _ := io.ReadAll(io.LimitReader(errStream, 4096))
		if len(msg) > 0 {
			c.Close()
		}
	}()
	return c, nil
}

// streamConn is a port-forwarded data stream as a net.Conn. Deadlines
// are not kept: the HTTP client bounds its requests by their contexts,
// which close the connection.
type streamConn struct {
	conn   httpstream.Connection
	data   httpstream.Stream
	closed atomic.Bool
}

func (c *streamConn) Read(b []byte) (int, error)  { return c.data.Read(b) }
func (c *streamConn) Write(b []byte) (int, error) { return c.data.Write(b) }
func (c *streamConn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	_ = c.data.Reset()
	return c.conn.Close()
}
func (c *streamConn) LocalAddr() net.Addr              { return pfAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return pfAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

type pfAddr struct{}

func (pfAddr) Network() string { return "portforward" }
func (pfAddr) String() string  { return "portforward" }
