// Package e2bfake is a fake of E2B for tests: its control API, envd (the
// daemon in each sandbox) and the proxy to sandboxes' ports, served over
// loopback, with every sandbox a real machine of package
// provider/remote/remotefake where commands run for real.
//
// It follows E2B's published API, kept unmodified in provider/e2b/testdata
// (from e2b-dev/infra): spec/openapi.yml for the control API and
// packages/envd/spec/envd.yaml for envd's /files, against which it
// validates every request it receives and every answer it sends (with
// github.com/getkin/kin-openapi), and packages/envd/spec/process/process.proto
// for envd's process service in the Connect protocol's JSON form, whose
// messages it decodes strictly. The schemas are read stricter than E2B
// reads them: an object's property the spec does not name is refused, so
// a field of the wrong case fails a test instead of being ignored. A
// request that breaks the spec is answered 400 and recorded
// ([Server.Violations]); an answer of the fake's that breaks it is
// answered 500 instead, and recorded.
//
// It keeps the E2B semantics a client depends on: a sandbox past its
// timeout is killed (or paused, with autoPause) unless /timeout or
// /connect moved it; a paused sandbox's ports, envd's among them, answer
// 502 "The sandbox was not found", as E2B's proxy does, until /connect
// resumes it; /v2/sandboxes filters by metadata; a process envd starts
// outlives its Start stream, unless the request carried Connect-Timeout-Ms,
// whose time envd kills it at. Faults are injected with [Server.Inject]
// (a status with Retry-After, a lost answer) and [Server.Vanish], latency
// with Options.Latency.
package e2bfake

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/provider/remote/remotefake/apispec"
)

// Options configure a Server.
type Options struct {
	// Farm makes the sandboxes' machines. Required.
	Farm *remotefake.Farm
	// APIKey is the only key the fake accepts. Required.
	APIKey string
	// Templates are the template ids the fake knows; empty means any.
	Templates []string
	// MaxTimeout is the team's longest sandbox timeout (E2B's plans: 1 or
	// 24 hours); zero means 24 hours.
	MaxTimeout time.Duration
	// MaxSandboxes is the team's concurrency limit, answered 429 past it
	// as E2B words it; zero means 20.
	MaxSandboxes int
	// Latency delays every request.
	Latency time.Duration
	// SpecDir holds openapi.yml and envd.yaml; empty means
	// provider/e2b/testdata beside this package's source.
	SpecDir string
	// Logger receives what the fake does; nil means slog.Default().
	Logger *slog.Logger
}

// Fault is an injected failure: the next Times requests that Match
// picks are answered Status (with Retry-After when set), or, with Drop,
// handled in full and their answer lost: the connection closes instead.
type Fault struct {
	Match      func(*http.Request) bool
	Status     int
	RetryAfter string
	Drop       bool
	// Times is how many requests it hits; zero means one.
	Times int
}

// Route matches requests of method whose path is path, or, when path
// ends in "/", begins with it.
func Route(method, path string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if r.Method != method {
			return false
		}
		if strings.HasSuffix(path, "/") {
			return strings.HasPrefix(r.URL.Path, path)
		}
		return r.URL.Path == path
	}
}

// Server is a running fake.
type Server struct {
	opts Options
	log  *slog.Logger
	api  *httptest.Server
	box  *httptest.Server

	apiRouter  routers.Router
	envdRouter routers.Router

	ctx    context.Context
	cancel context.CancelFunc

	mu         sync.Mutex
	sandboxes  map[string]*sandbox
	faults     []*Fault
	violations []string
	requests   map[string]int
	wg         sync.WaitGroup
}

// New starts a fake on loopback.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Farm == nil || opts.APIKey == "" {
		return nil, errors.New("e2bfake: Options.Farm and Options.APIKey are required")
	}
	if opts.MaxTimeout == 0 {
		opts.MaxTimeout = 24 * time.Hour
	}
	if opts.MaxSandboxes == 0 {
		opts.MaxSandboxes = 20
	}
	if opts.SpecDir == "" {
		_, file, _, _ := runtime.Caller(0)
		opts.SpecDir = filepath.Join(filepath.Dir(file), "..", "testdata")
	}
	s := &Server{opts: opts, log: opts.Logger, sandboxes: map[string]*sandbox{}, requests: map[string]int{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.api = httptest.NewUnstartedServer(http.HandlerFunc(s.serveAPI))
	s.box = httptest.NewUnstartedServer(http.HandlerFunc(s.serveSandbox))
	var err error
	if s.apiRouter, err = loadRouter(ctx, filepath.Join(opts.SpecDir, "openapi.yml"), "http://"+s.api.Listener.Addr().String()); err != nil {
		return nil, err
	}
	if s.envdRouter, err = loadRouter(ctx, filepath.Join(opts.SpecDir, "envd.yaml"), "http://"+s.box.Listener.Addr().String()); err != nil {
		return nil, err
	}
	s.api.Start()
	s.box.Start()
	return s, nil
}

// loadRouter loads a spec and routes it at base (its servers replaced
// in memory: the file names E2B's hosts).
func loadRouter(ctx context.Context, path, base string) (routers.Router, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("e2bfake: read the spec: %w", err)
	}
	return apispec.Load(ctx, filepath.Base(path), b, base)
}

// URL is the control API's base URL (the client's api-url).
func (s *Server) URL() string { return s.api.URL }

// SandboxURL is the stable host of every sandbox's ports, routed by the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers (the client's sandbox-url).
func (s *Server) SandboxURL() string { return s.box.URL }

// Close kills every sandbox and stops the fake.
func (s *Server) Close() {
	s.api.CloseClientConnections()
	s.box.CloseClientConnections()
	s.api.Close()
	s.box.Close()
	s.cancel()
	s.mu.Lock()
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	for _, sb := range all {
		s.kill(sb, "the fake closed")
	}
	s.wg.Wait()
}

// Inject adds a fault.
func (s *Server) Inject(f Fault) {
	if f.Times == 0 {
		f.Times = 1
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// Violations returns what broke the spec so far, requests and answers,
// and forgets it.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.violations
	s.violations = nil
	return v
}

// Requests says how many requests the fake has had for an operation
// ("POST /sandboxes", "POST /process.Process/Start").
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

func (s *Server) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Warn("e2bfake: spec violation", "violation", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, msg)
}

// fault takes the first fault matching r.
func (s *Server) fault(r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Match == nil || f.Match(r) {
			f.Times--
			if f.Times <= 0 {
				s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			}
			c := *f
			return &c
		}
	}
	return nil
}

// delay waits Options.Latency, at the start of every request, the
// control API's and the sandboxes' (envd's and the ports' proxy) alike;
// false when the client went first.
func (s *Server) delay(r *http.Request) bool {
	if s.opts.Latency <= 0 {
		return true
	}
	select {
	case <-time.After(s.opts.Latency):
		return true
	case <-r.Context().Done():
		return false
	}
}

func (s *Server) count(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
}

// recorder holds an answer until it is validated.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// validated serves r with h, checking the request and the answer against
// router's spec, then writes the answer, or loses it as fault says.
func (s *Server) validated(w http.ResponseWriter, r *http.Request, router routers.Router, h func(http.ResponseWriter, *http.Request, map[string]string)) {
	route, params, err := router.FindRoute(r)
	if err != nil {
		s.violation("%s %s: no such operation in the spec: %v", r.Method, r.URL.Path, err)
		writeError(w, http.StatusNotFound, "no such operation")
		return
	}
	s.count(r.Method + " " + route.Path)
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		s.violation("request %s %s: %s", r.Method, r.URL.Path, firstLine(err))
		s.respond(w, r, in, nil, func(w http.ResponseWriter) {
			writeError(w, http.StatusBadRequest, "request does not follow the spec: "+firstLine(err))
		})
		return
	}
	f := s.fault(r)
	s.respond(w, r, in, f, func(w http.ResponseWriter) {
		if f != nil && !f.Drop {
			if f.RetryAfter != "" {
				w.Header().Set("Retry-After", f.RetryAfter)
			}
			writeError(w, f.Status, http.StatusText(f.Status))
			return
		}
		h(w, r, params)
	})
}

// respond runs write into a recorder, validates the answer, and sends it.
func (s *Server) respond(w http.ResponseWriter, r *http.Request, in *openapi3filter.RequestValidationInput, f *Fault, write func(http.ResponseWriter)) {
	rec := &recorder{header: http.Header{}}
	write(rec)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 rec.status,
		Header:                 rec.header,
		Body:                   io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Options:                &openapi3filter.Options{IncludeResponseStatus: rec.status < 400},
	}
	if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
		s.violation("answer %d to %s %s: %s", rec.status, r.Method, r.URL.Path, firstLine(err))
		rec = &recorder{header: http.Header{}}
		writeError(rec, http.StatusInternalServerError, "the fake's answer broke the spec")
	}
	if f != nil && f.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// writeError writes the spec's Error.
func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
