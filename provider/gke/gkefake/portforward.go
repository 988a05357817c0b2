package gkefake

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// The port forward's protocol, as the kubelet speaks it (the stream
// headers of k8s.io/api/core/v1).
const (
	portForwardProtocol = "portforward.k8s.io"
	headerStreamType    = "streamType"
	headerPort          = "port"
	headerRequestID     = "requestID"
)

var podsGR = schema.GroupResource{Resource: "pods"}

func metaOf(obj runtime.Object) (metav1.Object, error) { return meta.Accessor(obj) }

// servePortForward serves POST /api/v1/namespaces/NS/pods/NAME/portforward:
// a SPDY connection whose streams, a pair (error, data) per forwarded
// connection, reach a port of the pod's machine.
func (s *Server) servePortForward(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 7 || parts[2] != "namespaces" || parts[4] != "pods" || parts[6] != "portforward" {
		s.begin("unknown")
		s.violation("%s %s: no such resource", r.Method, r.URL.Path)
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	ns, pod := parts[3], parts[5]
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		s.begin("unknown")
		s.violation("%s %s: method not allowed", r.Method, r.URL.Path)
		writeStatus(w, apierrors.NewMethodNotSupported(podsGR, r.Method))
		return
	}
	f := s.begin("portforward")
	if failed(w, f, podsGR, pod) {
		return
	}
	m, ok := s.Machine(ns, pod)
	if !ok {
		writeStatus(w, apierrors.NewNotFound(podsGR, pod))
		return
	}
	if !httpstream.IsUpgradeRequest(r) {
		s.violation("%s %s: not an upgrade", r.Method, r.URL.Path)
		writeStatus(w, apierrors.NewBadRequest("Upgrade request required"))
		return
	}
	if _, err := httpstream.Handshake(r, w, []string{portForwardProtocol}); err != nil {
		s.violation("%s %s: handshake: %v", r.Method, r.URL.Path, err)
		return
	}
	streams := make(chan httpstream.Stream, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(st httpstream.Stream, replySent <-chan struct{}) error {
		select {
		case streams <- st:
		case <-s.ctx.Done():
		}
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	conn.SetIdleTimeout(10 * time.Minute)
	errorStreams := map[string]httpstream.Stream{}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-conn.CloseChan():
			return
		case <-s.ctx.Done():
			return
		case st := <-streams:
			h := st.Headers()
			id := h.Get(headerRequestID)
			switch h.Get(headerStreamType) {
			case "error":
				errorStreams[id] = st
			case "data":
				es := errorStreams[id]
				delete(errorStreams, id)
				port, err := strconv.Atoi(h.Get(headerPort))
				if err != nil || port < 1 || port > 65535 || es == nil {
					s.violation("port forward: stream %q: port %q, error stream %v", id, h.Get(headerPort), es != nil)
					st.Reset()
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.forward(m, port, st, es)
				}()
			default:
				s.violation("port forward: stream type %q", h.Get(headerStreamType))
				st.Reset()
			}
		}
	}
}

// forward copies between the data stream and port in m. Every message
// the client sends (its first bytes, or its first after an answer from
// the pod) waits the fake's latency, one round trip to the API server
// and the kubelet, and is counted as "portforward trip".
func (s *Server) forward(m *remotefake.Machine, port int, data, errs httpstream.Stream) {
	defer data.Close()
	defer errs.Close()
	c, err := m.Dial(s.ctx, port)
	if err != nil {
		fmt.Fprintf(errs, "error forwarding port %d to pod: %v", port, err)
		return
	}
	defer c.Close()
	var answered atomic.Bool
	answered.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				answered.Store(true)
				if _, werr := data.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := data.Read(buf)
		if n > 0 {
			if answered.Swap(false) {
				s.begin("portforward trip")
			}
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	select {
	case <-done:
	case <-s.ctx.Done():
	}
}
