package agentcoreinit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Server holds the requests relayed to the daemon. Its methods are safe
// for concurrent use.
type Server struct {
	target string // the daemon's host:port, on the loopback
	token  string
	dir    string // the relay's directory: BodyFiles are in it
	client *http.Client

	mu      sync.Mutex
	streams map[string]*stream
}

// maxBody bounds what the server holds of a request's body that the
// daemon has not read: a write beyond it is taken in part, and the host
// sends the rest again.
const maxBody = 8 << 20

// maxBodyFile bounds a BodyFile.
const maxBodyFile = 16 << 20

// keepDone is how long a request whose answer was all read is kept, so
// that a call sent again after a lost reply still finds it.
const keepDone = 30 * time.Second

// linger is how long a read that has some of the answer waits for more,
// so that a burst of output goes in one reply.
const linger = 3 * time.Millisecond

// NewServer returns a server that relays to the daemon at target
// (host:port) with its bearer token, taking body files from dir.
func NewServer(target, token, dir string) *Server {
	return &Server{
		target: target, token: token, dir: dir, streams: map[string]*stream{},
		client: &http.Client{Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		}},
	}
}

// stream is one request relayed to the daemon.
type stream struct {
	cancel context.CancelFunc

	mu      sync.Mutex
	changed chan struct{} // closed, and replaced, at every change
	touched time.Time     // the last call about it
	// The request's body: what the daemon has not read yet, and how much
	// the host has given in all.
	body    []byte
	bodyOff int64
	bodyEOF bool
	closed  bool
	// The answer: buf holds its bytes from bufOff on.
	status    int
	header    http.Header
	buf       []byte
	bufOff    int64
	done      bool // the answer's body has ended
	err       error
	delivered time.Time // when the host was given the answer's end
}

func (s *stream) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Read implements io.Reader for the request's body, as the daemon reads it.
func (s *stream) Read(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.body) == 0 {
		switch {
		case s.closed:
			return 0, errors.New("relay: request closed")
		case s.bodyEOF:
			return 0, io.EOF
		}
		ch := s.changed
		s.mu.Unlock()
		<-ch
		s.mu.Lock()
	}
	n := copy(p, s.body)
	s.body = s.body[n:]
	s.notify()
	return n, nil
}

// Serve answers calls on l until it fails.
func (srv *Server) Serve(l net.Listener) error {
	go srv.sweep()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go srv.serveConn(c)
	}
}

func (srv *Server) serveConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(MaxWait + 10*time.Second))
	line, err := bufio.NewReaderSize(io.LimitReader(c, MaxCall+1), 64<<10).ReadBytes('\n')
	var reply Reply
	var call Call
	switch {
	case err != nil && !errors.Is(err, io.EOF):
		reply.Error = "relay: read the call: " + err.Error()
	case json.Unmarshal(line, &call) != nil:
		reply.Error = "relay: the call is not JSON"
	default:
		reply = srv.Handle(call)
	}
	b, _ := json.Marshal(reply)
	_, _ = c.Write(append(b, '\n'))
}

// Handle answers one call.
func (srv *Server) Handle(call Call) Reply {
	if call.ID == "" || len(call.ID) > 128 {
		return Reply{Error: "relay: bad request id"}
	}
	call.Wait = min(max(call.Wait, 0), MaxWait)
	switch call.Op {
	case OpOpen:
		s, created, err := srv.open(call)
		if err != nil {
			return Reply{Error: err.Error()}
		}
		if r, ok := srv.write(s, call); !ok {
			if created {
				// A request whose start cannot be had is no request.
				srv.drop(call.ID)
			}
			return r
		}
		return srv.read(call.ID, s, call)
	case OpWrite:
		s := srv.get(call.ID)
		if s == nil {
			return Reply{Error: NoStream + call.ID}
		}
		r, _ := srv.write(s, call)
		return r
	case OpRead:
		s := srv.get(call.ID)
		if s == nil {
			return Reply{Error: NoStream + call.ID}
		}
		return srv.read(call.ID, s, call)
	case OpClose:
		srv.drop(call.ID)
		return Reply{Done: true}
	}
	return Reply{Error: fmt.Sprintf("relay: unknown op %q", call.Op)}
}

func (srv *Server) get(id string) *stream {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	s := srv.streams[id]
	if s != nil {
		s.mu.Lock()
		s.touched = time.Now()
		s.mu.Unlock()
	}
	return s
}

// open starts the request of call, or finds the one an earlier open of
// its ID started (a call sent again).
func (srv *Server) open(call Call) (*stream, bool, error) {
	if s := srv.get(call.ID); s != nil {
		return s, false, nil
	}
	if !strings.HasPrefix(call.Target, "/") {
		return nil, false, errors.New("relay: the target is not a path")
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	live := 0
	for _, s := range srv.streams {
		s.mu.Lock()
		if !s.done && s.err == nil {
			live++
		}
		s.mu.Unlock()
	}
	if live >= MaxStreams {
		return nil, false, fmt.Errorf("relay: %d requests under way already", live)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{cancel: cancel, changed: make(chan struct{}), touched: time.Now()}
	req, err := http.NewRequestWithContext(ctx, call.Method, "http://"+srv.target+call.Target, s)
	if err != nil {
		cancel()
		return nil, false, fmt.Errorf("relay: %v", err)
	}
	for k, vs := range call.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Authorization", "Connection", "Content-Length", "Transfer-Encoding", "Host":
			continue
		}
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+srv.token)
	if call.EOF && call.BodyFile == "" && call.BodyOffset == 0 {
		// The whole body is here: the daemon sees its length.
		req.ContentLength = int64(len(call.Body))
		if req.ContentLength == 0 {
			req.Body = http.NoBody
		}
	}
	srv.streams[call.ID] = s
	go s.run(srv.client, req)
	return s, true, nil
}

// run sends the request and takes in its answer, holding at most
// 2*MaxReply bytes that the host has not read.
func (s *stream) run(c *http.Client, req *http.Request) {
	resp, err := c.Do(req)
	s.mu.Lock()
	if err != nil {
		s.err = err
		s.notify()
		s.mu.Unlock()
		return
	}
	s.status, s.header = resp.StatusCode, resp.Header
	s.notify()
	s.mu.Unlock()
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		s.mu.Lock()
		s.buf = append(s.buf, buf[:n]...)
		switch {
		case errors.Is(err, io.EOF):
			s.done = true
		case err != nil:
			s.err = err
		}
		s.notify()
		for err == nil && len(s.buf) >= 2*MaxReply && !s.closed {
			ch := s.changed
			s.mu.Unlock()
			<-ch
			s.mu.Lock()
		}
		stop := err != nil || s.closed
		s.mu.Unlock()
		if stop {
			return
		}
	}
}

// write adds the call's piece of body; ok is false when it failed.
func (srv *Server) write(s *stream, call Call) (Reply, bool) {
	data := call.Body
	if call.BodyFile != "" {
		b, err := srv.bodyFile(call.BodyFile)
		if err != nil {
			s.mu.Lock()
			defer s.mu.Unlock()
			if errors.Is(err, fs.ErrNotExist) && s.bodyOff > call.BodyOffset {
				// A call sent again: its file was taken the first time.
				return Reply{BodyOffset: s.bodyOff}, true
			}
			return Reply{Error: err.Error()}, false
		}
		data = b
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case call.BodyOffset > s.bodyOff:
		return Reply{Error: fmt.Sprintf("relay: body at %d, the server holds %d", call.BodyOffset, s.bodyOff)}, false
	case s.bodyEOF || s.closed:
		return Reply{BodyOffset: s.bodyOff}, true
	}
	skip := s.bodyOff - call.BodyOffset
	if skip > int64(len(data)) {
		skip = int64(len(data))
	}
	data = data[skip:]
	room := max(maxBody-len(s.body), 0)
	whole := len(data) <= room
	if !whole {
		data = data[:room]
	}
	s.body = append(s.body, data...)
	s.bodyOff += int64(len(data))
	if call.EOF && whole {
		s.bodyEOF = true
	}
	s.notify()
	return Reply{BodyOffset: s.bodyOff}, true
}

// bodyFile reads, and removes, a body file of the relay's directory.
func (srv *Server) bodyFile(name string) ([]byte, error) {
	if name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return nil, errors.New("relay: bad body file")
	}
	p := filepath.Join(srv.dir, name)
	defer os.Remove(p)
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("relay: body file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBodyFile+1))
	if err != nil {
		return nil, fmt.Errorf("relay: body file: %w", err)
	}
	if len(b) > maxBodyFile {
		return nil, errors.New("relay: body file too large")
	}
	return b, nil
}

// read answers with the answer from call.Offset on, once there is some,
// or it has ended, or call.Wait has passed.
func (srv *Server) read(id string, s *stream, call Call) Reply {
	deadline := time.NewTimer(call.Wait)
	defer deadline.Stop()
	var lingering <-chan time.Time
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.bufOff + int64(len(s.buf))
	if call.Offset < s.bufOff || call.Offset > end {
		return Reply{Error: fmt.Sprintf("relay: answer at %d, the server holds %d to %d", call.Offset, s.bufOff, end)}
	}
	s.buf = s.buf[call.Offset-s.bufOff:]
	s.bufOff = call.Offset
	s.notify()
wait:
	for s.err == nil && !s.done && !(s.status != 0 && len(s.buf) >= MaxReply) {
		if s.status != 0 && len(s.buf) > 0 && lingering == nil {
			t := time.NewTimer(linger)
			defer t.Stop()
			lingering = t.C
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
			s.mu.Lock()
		case <-lingering:
			s.mu.Lock()
			break wait
		case <-deadline.C:
			s.mu.Lock()
			break wait
		}
	}
	r := Reply{Status: s.status, Header: s.header, BodyOffset: s.bodyOff}
	n := min(len(s.buf), MaxReply)
	r.Data = append([]byte(nil), s.buf[:n]...)
	if n == len(s.buf) {
		r.Done = s.done
		if s.err != nil {
			r.Error = "relay: " + s.err.Error()
		}
		if r.Done || s.err != nil {
			s.delivered = time.Now()
		}
	}
	return r
}

// drop ends and forgets request id.
func (srv *Server) drop(id string) {
	srv.mu.Lock()
	s := srv.streams[id]
	delete(srv.streams, id)
	srv.mu.Unlock()
	if s != nil {
		s.close()
	}
}

func (s *stream) close() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	s.notify()
	s.mu.Unlock()
}

// sweep forgets, now and then, the requests no host asks about any more.
func (srv *Server) sweep() {
	for range time.Tick(5 * time.Second) {
		srv.mu.Lock()
		var old []*stream
		for id, s := range srv.streams {
			s.mu.Lock()
			idle := time.Since(s.touched) > IdleTimeout
			over := !s.delivered.IsZero() && time.Since(s.delivered) > keepDone
			s.mu.Unlock()
			if idle || over {
				delete(srv.streams, id)
				old = append(old, s)
			}
		}
		srv.mu.Unlock()
		for _, s := range old {
			s.close()
		}
	}
}
