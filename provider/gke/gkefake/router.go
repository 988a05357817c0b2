package gkefake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// RuntimePort is the runtime's port, the router's default.
const RuntimePort = 8888

// Bounds of the runtime's answers and requests.
const (
	maxExecOutput = 8 << 20
	maxUploadBody = 256 << 20
)

func routerError(w http.ResponseWriter, code int, detail string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"detail": detail})
}

// serveRouter routes a request as the sandbox router does: by
// X-Sandbox-ID, X-Sandbox-Namespace and X-Sandbox-Port.
func (s *Server) serveRouter(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		s.begin("router healthz")
		routerError(w, http.StatusOK, "ok")
		return
	}
	id := r.Header.Get("X-Sandbox-ID")
	ns := r.Header.Get("X-Sandbox-Namespace")
	if ns == "" {
		ns = "default"
	}
	port := RuntimePort
	switch {
	case id == "":
		s.begin("router")
		s.violation("%s %s: no X-Sandbox-ID", r.Method, r.URL.Path)
		routerError(w, http.StatusBadRequest, "X-Sandbox-ID header is required.")
		return
	case len(validation.IsDNS1123Label(id)) > 0:
		s.begin("router")
		s.violation("%s %s: X-Sandbox-ID %q", r.Method, r.URL.Path, id)
		routerError(w, http.StatusBadRequest, "Invalid sandbox ID format.")
		return
	case len(validation.IsDNS1123Label(ns)) > 0:
		s.begin("router")
		s.violation("%s %s: X-Sandbox-Namespace %q", r.Method, r.URL.Path, ns)
		routerError(w, http.StatusBadRequest, "Invalid namespace format.")
		return
	}
	if p := r.Header.Get("X-Sandbox-Port"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			s.begin("router")
			s.violation("%s %s: X-Sandbox-Port %q", r.Method, r.URL.Path, p)
			routerError(w, http.StatusBadRequest, "Invalid port format.")
			return
		}
		port = n
	}
	m, ok := s.Machine(ns, id)
	if ip := r.Header.Get("X-Sandbox-Pod-IP"); ok && ip != "" {
		if net.ParseIP(ip) == nil {
			s.begin("router")
			s.violation("%s %s: X-Sandbox-Pod-IP %q", r.Method, r.URL.Path, ip)
			routerError(w, http.StatusBadRequest, "Invalid target IP address.")
			return
		}
		// The router would dial that address: one that is not the pod's
		// reaches nothing.
		ok = ip == s.podIPOf(ns, id)
	}
	if port != RuntimePort {
		s.proxy(w, r, m, ok, id, port)
		return
	}
	op := runtimeOp(r)
	f := s.begin(op)
	if !ok {
		routerError(w, http.StatusBadGateway, "Could not connect to the backend sandbox: "+id)
		return
	}
	if f != nil && !f.Drop {
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		routerError(w, f.Status, f.Message)
		return
	}
	var rec bytes.Buffer
	rw := &capture{header: http.Header{}, body: &rec}
	switch op {
	case "execute":
		s.execute(rw, r, m)
	case "upload":
		s.upload(rw, r, m)
	case "download":
		s.download(rw, r, m)
	case "health":
		writeJSON(rw, http.StatusOK, map[string]string{"status": "ok", "message": "Sandbox Runtime is active."})
	default:
		s.violation("%s %s: not the runtime's", r.Method, r.URL.Path)
		writeJSON(rw, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	}
	if f != nil && f.Drop {
		dropConn(w)
		return
	}
	for k, v := range rw.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rw.code)
	_, _ = w.Write(rec.Bytes())
}

// capture keeps an answer until the fault, if any, says whether it goes.
type capture struct {
	header http.Header
	body   *bytes.Buffer
	code   int
}

func (c *capture) Header() http.Header { return c.header }
func (c *capture) WriteHeader(code int) {
	if c.code == 0 {
		c.code = code
	}
}
func (c *capture) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	return c.body.Write(b)
}

func runtimeOp(r *http.Request) string {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/execute":
		return "execute"
	case r.Method == http.MethodPost && r.URL.Path == "/upload":
		return "upload"
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/download/"):
		return "download"
	case r.Method == http.MethodGet && r.URL.Path == "/":
		return "health"
	}
	return "runtime " + r.Method
}

func (s *Server) podIPOf(ns, name string) string {
	obj, err := s.agents.Tracker().Get(sandboxesGVR, ns, name)
	if err != nil {
		return ""
	}
	m, _ := metaOf(obj)
	return podIP(m.GetUID())
}

// proxy forwards r to port in m, with Authorization removed, as the
// router does.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, m *remotefake.Machine, ok bool, id string, port int) {
	s.begin("router proxy")
	if !ok {
		routerError(w, http.StatusBadGateway, "Could not connect to the backend sandbox: "+id)
		return
	}
	target := &url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Authorization")
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return m.Dial(ctx, port)
		}},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) {
			routerError(w, http.StatusBadGateway, "Could not connect to the backend sandbox: "+id)
		},
	}
	rp.ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// execute runs the command as the example runtime does: split as shlex
// splits it, no shell, in /app, as root; the answer holds its output.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, m *remotefake.Machine) {
	var req struct {
		Command *string `json:"command"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Command == nil {
		s.violation("POST /execute: body: %v", err)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "command: field required"})
		return
	}
	argv, err := shlexSplit(*req.Command)
	if err != nil || len(argv) == 0 {
		writeJSON(w, http.StatusOK, map[string]any{"stdout": "", "stderr": fmt.Sprintf("Failed to execute command: %v", err), "exit_code": 1})
		return
	}
	p, err := m.Start(r.Context(), remotefake.Command{Argv: argv, Dir: RuntimeDir})
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"stdout": "", "stderr": "Failed to execute command: " + err.Error(), "exit_code": 1})
		return
	}
	var stdout, stderr bytes.Buffer
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(&stderr, io.LimitReader(p.Stderr(), maxExecOutput))
		_, _ = io.Copy(io.Discard, p.Stderr())
		close(done)
	}()
	_, _ = io.Copy(&stdout, io.LimitReader(p.Stdout(), maxExecOutput))
	_, _ = io.Copy(io.Discard, p.Stdout())
	<-done
	code, err := p.Wait()
	if err != nil {
		code = 1
		stderr.WriteString("Failed to execute command: " + err.Error())
	}
	writeJSON(w, http.StatusOK, map[string]any{"stdout": stdout.String(), "stderr": stderr.String(), "exit_code": code})
}

// upload writes the multipart field "file" to /app/<its file name>.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, m *remotefake.Machine) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxUploadBody)
	mr, err := r.MultipartReader()
	if err != nil {
		s.violation("POST /upload: %v", err)
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "file: field required"})
		return
	}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			s.violation("POST /upload: no field \"file\"")
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"detail": "file: field required"})
			return
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "bad multipart body"})
			return
		}
		if part.FormName() != "file" {
			continue
		}
		name := part.FileName()
		full := path.Join(RuntimeDir, strings.TrimLeft(name, "/"))
		if name == "" || !strings.HasPrefix(full, RuntimeDir+"/") {
			writeJSON(w, http.StatusForbidden, map[string]string{"message": "Access denied"})
			return
		}
		if err := m.WriteFile(r.Context(), full, part, 0o644); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"message": "upload failed: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"message": fmt.Sprintf("File '%s' uploaded successfully.", name)})
		return
	}
}

// download answers the file under /app that the path names.
func (s *Server) download(w http.ResponseWriter, r *http.Request, m *remotefake.Machine) {
	rel, err := url.PathUnescape(strings.TrimPrefix(r.URL.EscapedPath(), "/download/"))
	full := path.Join(RuntimeDir, strings.TrimLeft(rel, "/"))
	if err != nil || !strings.HasPrefix(full, RuntimeDir+"/") {
		writeJSON(w, http.StatusForbidden, map[string]string{"message": "Access denied"})
		return
	}
	rc, err := m.ReadFile(r.Context(), full)
	if err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "File not found"})
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, io.LimitReader(rc, maxUploadBody))
}

// shlexSplit splits s as Python's shlex.split does in POSIX mode: words
// by blanks, with '...' literal, "..." with \ escaping " \ $ `, and \
// outside quotes escaping the next character.
func shlexSplit(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\\':
			inWord = true
			if i+1 >= len(s) {
				return nil, errors.New("no escaped character")
			}
			i++
			cur.WriteByte(s[i])
		case c == '\'':
			inWord = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("no closing quotation")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inWord = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("no closing quotation")
			}
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
