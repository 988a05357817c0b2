package e2bfake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// envdPort is envd's port in every sandbox.
const envdPort = 49983

// serveSandbox is E2B's proxy to sandboxes' ports, on the stable host:
// the E2b-Sandbox-Id and E2b-Sandbox-Port headers name the port. envd's
// port is served by the fake itself; any other is forwarded to the
// machine's port.
func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request) {
	id, portText := r.Header.Get("E2b-Sandbox-Id"), r.Header.Get("E2b-Sandbox-Port")
	if id == "" || portText == "" {
		s.count("unrouted")
		http.Error(w, "Missing header: E2b-Sandbox-Id or E2b-Sandbox-Port", http.StatusBadRequest)
		return
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		http.Error(w, "Invalid sandbox port", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	running := sb != nil && !sb.paused
	s.mu.Unlock()
	if !running {
		// E2B's proxy: packages/shared/pkg/proxy/template/sandbox_not_found.go.
		s.count("sandbox not found")
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway})
		return
	}
	if port != envdPort {
		s.forward(w, r, sb, int(port))
		return
	}
	if sb.envdToken != "" && r.Header.Get("X-Access-Token") != sb.envdToken {
		s.count("envd unauthorized")
		writeConnectError(w, http.StatusUnauthorized, "unauthenticated", "invalid access token")
		return
	}
	switch r.URL.Path {
	case "/process.Process/Start":
		s.count("POST /process.Process/Start")
		s.start(w, r, sb)
	case "/process.Process/SendSignal":
		s.count("POST /process.Process/SendSignal")
		s.sendSignal(w, r, sb)
	default:
		s.validated(w, r, s.envdRouter, func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
			if r.Method == http.MethodPost && r.URL.Path == "/files" {
				s.upload(w, r, sb)
				return
			}
			writeError(w, http.StatusNotImplemented, "the fake does not serve this operation")
		})
	}
}

// forward proxies r to port of sb's machine.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, sb *sandbox, port int) {
	s.count("forward")
	// E2B's proxy serves HTTP/2, where a request's body and its answer
	// flow at once (a command's stdin and its output): HTTP/1.1 needs
	// asking for it.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "127.0.0.1:" + strconv.Itoa(port)
			pr.Out.Host = pr.Out.URL.Host
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := sb.machine.Dial(ctx, port)
				if err != nil {
					return nil, err
				}
				return sb.track(c), nil
			},
			DisableKeepAlives: true,
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			// E2B's proxy: packages/shared/pkg/proxy/template/port_closed.go.
			writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": sb.id, "message": "The sandbox is running but port is not open", "port": port, "code": http.StatusBadGateway})
		},
	}
	rp.ServeHTTP(w, r)
}

// The process service's messages (process.proto) as proto JSON, decoded
// strictly: a field process.proto does not name fails the request.
type (
	processConfig struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args"`
		Envs map[string]string `json:"envs"`
		Cwd  *string           `json:"cwd"`
	}
	pty struct {
		Size *struct {
			Cols uint32 `json:"cols"`
			Rows uint32 `json:"rows"`
		} `json:"size"`
	}
	startRequest struct {
		Process *processConfig `json:"process"`
		Pty     *pty           `json:"pty"`
		Tag     *string        `json:"tag"`
		Stdin   *bool          `json:"stdin"`
	}
	processSelector struct {
		Pid *uint32 `json:"pid"`
		Tag *string `json:"tag"`
	}
	sendSignalRequest struct {
		Process *processSelector `json:"process"`
		Signal  string           `json:"signal"`
	}
)

// strictJSON decodes b into v, refusing fields v does not name.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func writeConnectError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}

// user is the user a request acts as: basic auth's name, as envd reads it.
func user(r *http.Request) (string, error) {
	name, _, ok := r.BasicAuth()
	if !ok {
		if r.Header.Get("Authorization") != "" {
			return "", errors.New("unreadable Authorization")
		}
		return defaultUser, nil
	}
	if name != "root" && name != "user" {
		return "", fmt.Errorf("invalid username: '%s'", name)
	}
	return name, nil
}

// streamWriter writes Connect stream messages.
type streamWriter struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	closed bool
}

func (sw *streamWriter) send(flags byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.closed {
		return io.ErrClosedPipe
	}
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := sw.w.Write(append(hdr[:], b...)); err != nil {
		sw.closed = true
		return err
	}
	if f, ok := sw.w.(http.Flusher); ok {
		f.Flush()
	}
	return nil
}

func (sw *streamWriter) close() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.closed = true
}

// start serves process.Process/Start, as envd's start.go does: the
// process's context is Connect-Timeout-Ms long when the header is set,
// and unbounded (not the request's) otherwise.
func (s *Server) start(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/connect+json" {
		s.violation("envd Start: %s with Content-Type %q, not POST application/connect+json", r.Method, r.Header.Get("Content-Type"))
		writeConnectError(w, http.StatusUnsupportedMediaType, "unimplemented", "unsupported content type")
		return
	}
	msg, err := readFrame(r.Body)
	if err != nil {
		s.violation("envd Start: %v", err)
		writeConnectError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	var req startRequest
	if err := strictJSON(msg, &req); err != nil || req.Process == nil {
		s.violation("envd Start: the request is not a process.StartRequest: %v", err)
		writeConnectError(w, http.StatusBadRequest, "invalid_argument", "invalid StartRequest")
		return
	}
	var timeout time.Duration
	if h := r.Header.Get("Connect-Timeout-Ms"); h != "" {
		ms, err := strconv.Atoi(h)
		if err != nil || ms < 0 {
			writeConnectError(w, http.StatusBadRequest, "invalid_argument", "invalid Connect-Timeout-Ms")
			return
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	u, err := user(r)
	if err != nil {
		writeConnectError(w, http.StatusUnauthorized, "unauthenticated", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	sw := &streamWriter{w: w}
	defer sw.close()
	endStream := func(code, message string) {
		v := map[string]any{}
		if code != "" {
			v["error"] = map[string]string{"code": code, "message": message}
		}
		_ = sw.send(0x02, v)
	}
	cmd := remotefake.Command{Argv: append([]string{req.Process.Cmd}, req.Process.Args...), Env: req.Process.Envs, User: u}
	if req.Process.Cwd != nil {
		cmd.Dir = *req.Process.Cwd
	}
	cmd.Stdin = req.Stdin == nil || *req.Stdin
	if err := s.lookPath(r.Context(), sb, cmd); err != nil {
		endStream("invalid_argument", "error starting process: "+err.Error())
		return
	}
	p, err := sb.machine.Start(r.Context(), cmd)
	if err != nil {
		endStream("invalid_argument", "error starting process: "+firstLine(err))
		return
	}
	pid := uint32(p.PID())
	sb.procMu.Lock()
	sb.procs[pid] = p
	sb.procMu.Unlock()
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() { _ = p.Signal(context.Background(), syscall.SIGKILL) })
		go func() { <-p.Done(); t.Stop() }()
	}
	if err := sw.send(0, map[string]any{"event": map[string]any{"start": map[string]any{"pid": pid}}}); err != nil {
		sw.close()
	}
	// The output is read whether or not the stream is: a process outlives
	// its stream, and must not block on an unread pipe.
	var wg sync.WaitGroup
	for name, rd := range map[string]io.Reader{"stdout": p.Stdout(), "stderr": p.Stderr()} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := rd.Read(buf)
				if n > 0 {
					_ = sw.send(0, map[string]any{"event": map[string]any{"data": map[string]any{name: base64.StdEncoding.EncodeToString(buf[:n])}}})
				}
				if err != nil {
					return
				}
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		wg.Wait()
		p.Wait()
		sb.procMu.Lock()
		delete(sb.procs, pid)
		sb.procMu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-r.Context().Done():
		return // the stream ends; the process does not
	case <-done:
	}
	code, werr := p.Wait()
	end := map[string]any{}
	if werr != nil {
		end["status"] = "sandbox lost"
		end["error"] = firstLine(werr)
	} else if code >= 128 {
		sig := syscall.Signal(code - 128)
		end["exitCode"] = -1
		end["status"] = "signal: " + sig.String()
	} else {
		if code != 0 {
			end["exitCode"] = code
		}
		end["exited"] = true
		end["status"] = "exit status " + strconv.Itoa(code)
	}
	_ = sw.send(0, map[string]any{"event": map[string]any{"end": end}})
	endStream("", "")
}

// readFrame reads the one message of a Connect stream request.
func readFrame(r io.Reader) ([]byte, error) {
	br := bufio.NewReader(io.LimitReader(r, 1<<20))
	var hdr [5]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, fmt.Errorf("no envelope: %v", err)
	}
	if hdr[0] != 0 {
		return nil, fmt.Errorf("envelope flags %#x", hdr[0])
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	msg := make([]byte, n)
	if _, err := io.ReadFull(br, msg); err != nil {
		return nil, fmt.Errorf("short message: %v", err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errors.New("more than one message to a server stream")
	}
	return msg, nil
}

// sendSignal serves process.Process/SendSignal (unary).
func (s *Server) sendSignal(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		s.violation("envd SendSignal: %s with Content-Type %q, not POST application/json", r.Method, r.Header.Get("Content-Type"))
		writeConnectError(w, http.StatusUnsupportedMediaType, "unimplemented", "unsupported content type")
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var req sendSignalRequest
	if err := strictJSON(body, &req); err != nil || req.Process == nil {
		s.violation("envd SendSignal: the request is not a process.SendSignalRequest: %v", err)
		writeConnectError(w, http.StatusBadRequest, "invalid_argument", "invalid SendSignalRequest")
		return
	}
	var sig syscall.Signal
	switch req.Signal {
	case "SIGNAL_SIGTERM", "15":
		sig = syscall.SIGTERM
	case "SIGNAL_SIGKILL", "9":
		sig = syscall.SIGKILL
	default:
		s.violation("envd SendSignal: signal %q is not a process.Signal", req.Signal)
		writeConnectError(w, http.StatusBadRequest, "invalid_argument", "invalid signal")
		return
	}
	if req.Process.Pid == nil {
		writeConnectError(w, http.StatusNotFound, "not_found", "process selector by tag: the fake starts no tagged processes")
		return
	}
	sb.procMu.Lock()
	p := sb.procs[*req.Process.Pid]
	sb.procMu.Unlock()
	if p == nil {
		writeConnectError(w, http.StatusNotFound, "not_found", fmt.Sprintf("process with pid %d not found", *req.Process.Pid))
		return
	}
	if err := p.Signal(r.Context(), sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			writeConnectError(w, http.StatusNotFound, "not_found", fmt.Sprintf("process with pid %d not found", *req.Process.Pid))
			return
		}
		writeConnectError(w, http.StatusInternalServerError, "internal", "error sending signal: "+firstLine(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}"))
}

// upload serves POST /files with an octet-stream body (envd.yaml).
func (s *Server) upload(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/octet-stream") {
		writeError(w, http.StatusBadRequest, "the fake serves octet-stream uploads only")
		return
	}
	if p == "" || !path.IsAbs(p) {
		writeError(w, http.StatusBadRequest, "path is required and must be absolute")
		return
	}
	if u := r.URL.Query().Get("username"); u != "" && u != "root" && u != "user" {
		writeError(w, http.StatusUnauthorized, "error looking up user '"+u+"'")
		return
	}
	if err := sb.machine.WriteFile(r.Context(), path.Clean(p), r.Body, 0o644); err != nil {
		writeError(w, http.StatusInternalServerError, "error writing file: "+firstLine(err))
		return
	}
	writeJSON(w, http.StatusOK, []map[string]any{{"path": path.Clean(p), "name": path.Base(p), "type": "file"}})
}

// lookPath fails, as envd's exec.Cmd.Start does, for a program the
// machine does not have (the machine's shell would start and exit 127).
// It looks through the machine's files, not a process of its own.
func (s *Server) lookPath(ctx context.Context, sb *sandbox, cmd remotefake.Command) error {
	name := cmd.Argv[0]
	var candidates []string
	if strings.Contains(name, "/") {
		candidates = []string{name}
	} else {
		dirs := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		if p, ok := cmd.Env["PATH"]; ok {
			dirs = p
		}
		for _, d := range strings.Split(dirs, ":") {
			if path.IsAbs(d) {
				candidates = append(candidates, path.Join(d, name))
			}
		}
	}
	for _, c := range candidates {
		if !path.IsAbs(c) {
			c = path.Join("/", cmd.Dir, c) // the machine's default dir is /
		}
		if f, err := sb.machine.ReadFile(ctx, c); err == nil {
			f.Close()
			return nil
		}
	}
	return fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// trackedConn is a connection into a sandbox, closed when the sandbox
// ends: a connection into a network namespace that is gone would hang.
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

// track registers c with the sandbox, or closes it if the sandbox ended.
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

// closeConns closes every connection into the sandbox, and any made later.
func (sb *sandbox) closeConns() {
	sb.connMu.Lock()
	conns := sb.conns
	sb.conns, sb.connsClosed = nil, true
	sb.connMu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}
