// Package daytonafake is a fake of Daytona for tests: its control API,
// the toolbox (the daemon in each sandbox, reached through Daytona's
// proxy) and the preview proxy to sandboxes' ports, served over
// loopback, with every sandbox a real machine of package
// provider/remote/remotefake where commands run for real, as the user
// "daytona" (home /home/daytona), as in Daytona's default snapshot.
//
// It follows Daytona's published API, the OpenAPI documents of its Go
// clients (github.com/daytonaio/daytona/libs/api-client-go and
// libs/toolbox-api-client-go, v0.170.0), kept unmodified in testdata and
// embedded, against which it validates every request it receives and
// every answer it sends (with github.com/getkin/kin-openapi). The schemas
// are read stricter than Daytona reads them: an object's property the
// document does not name is refused, so a field of the wrong case fails
// a test instead of being ignored. A request that breaks the document is
// answered 400 and recorded ([Server.Violations]); an answer of the
// fake's that breaks it is answered 500 instead, and recorded.
//
// # URLs
//
// One loopback server serves everything; [Server.URL] is its base:
//
//   - <URL>/api is the control API (the SDK's DaytonaConfig.APIUrl),
//     e.g. POST <URL>/api/sandbox.
//   - <URL>/toolbox is every sandbox's toolboxProxyUrl; the SDK adds the
//     sandbox's id: <URL>/toolbox/<id>/process/execute.
//   - <URL>/preview/<id>/<port>/<path> is a port's preview URL, as GET
//     /api/sandbox/<id>/ports/<port>/preview-url answers it (with the
//     token that the header X-Daytona-Preview-Token must carry).
//
// # Semantics
//
// It keeps the Daytona semantics a client depends on, from Daytona's
// sources at v0.170.0 (apps/api, apps/proxy, apps/daemon): a sandbox is
// created in state "creating" and reaches "started" once its machine is
// up (plus Options.StartDelay); stop kills every process of the machine
// and keeps its files ("stopping", then "stopped"), archive needs a
// stopped sandbox, start brings a stopped or archived one back; a
// started sandbox with an autoStopInterval stops after that many minutes
// (Options.Minute each) with no activity: no toolbox or preview request
// (none in flight either), no POST last-activity, no update of the
// sandbox (a change of its state, labels or intervals); GETs of the API
// are no activity, as in Daytona; a stopped one is archived or
// deleted after its autoArchiveInterval or autoDeleteInterval; a
// sandbox not started answers its toolbox and previews 400 "... Is the
// Sandbox started?"; names are unique (409), CPU, memory and disk are
// bounded in total (400 "Total CPU limit exceeded..."), keys are checked
// (401). The toolbox runs /process/execute's command on the standard
// input of the sandbox's shell, as Daytona's daemon does, and a
// session's commands one after the other in one shell, each sourced, so
// that its directory and variables carry on; their logs are files under
// /home/daytona/.daytona/sessions in the machine, each line marked as
// stdout's or stderr's, as the daemon writes them.
//
// Faults are injected with [Server.Inject] (a status with Retry-After,
// a lost answer) and [Server.Vanish], latency with Options.Latency.
package daytonafake

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/provider/remote/remotefake/apispec"
)

// The documents the fake follows, as testdata/README.md says.
var (
	//go:embed testdata/api-openapi.yaml
	apiSpec []byte
	//go:embed testdata/toolbox-openapi.yaml
	toolboxSpec []byte
)

// Quota is an organization's limits on the sandboxes' total resources:
// CPU and memory count for sandboxes that are not stopped or archived,
// disk for every sandbox not archived.
type Quota struct {
	CPU       int // vCPUs
	MemoryGiB int
	DiskGiB   int
}

// Options configure a Server.
type Options struct {
	// Farm makes the sandboxes' machines. Required.
	Farm *remotefake.Farm
	// APIKey is the only key the fake accepts, as "Authorization: Bearer
	// <key>" on the API, the toolbox and previews alike. Required.
	APIKey string
	// OrganizationID is the key's organization; empty means a random
	// one. A request's X-Daytona-Organization-ID, when set, must be it.
	OrganizationID string
	// Snapshots are the snapshot names the fake knows; empty means any.
	// Every sandbox runs the farm's image whatever its snapshot or image.
	Snapshots []string
	// Quota bounds the organization's sandboxes; zero fields mean
	// Daytona's first tier: 10 vCPUs, 10 GiB of memory, 30 GiB of disk.
	Quota Quota
	// Minute is how long a minute of the auto-stop, auto-archive and
	// auto-delete intervals lasts; zero means a minute.
	Minute time.Duration
	// StartDelay is how long a sandbox stays "creating" past the making of
	// its machine, or "starting" (or "restoring") when started again.
	StartDelay time.Duration
	// Latency delays every request: the API's, the toolbox's and the
	// previews'.
	Latency time.Duration
	// Logger receives what the fake does; nil means slog.Default().
	Logger *slog.Logger
}

// Fault is an injected failure: the next Times requests of operation Op
// that Match (when set) picks are answered Status (with Retry-After when
// set), or, with Drop, handled in full and their answer lost: the
// connection closes instead. Op is a name Requests counts ("POST
// /sandbox"); empty means any.
type Fault struct {
	Op         string
	Match      func(*http.Request) bool
	Status     int
	RetryAfter string
	Drop       bool
	// Times is how many requests it hits; zero means one.
	Times int
}

// Server is a running fake.
type Server struct {
	opts   Options
	log    *slog.Logger
	srv    *httptest.Server
	orgID  string
	minute time.Duration

	apiRouter     routers.Router
	toolboxRouter routers.Router

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	sandboxes  map[string]*sandbox // by id
	faults     []*Fault
	violations []string
	requests   map[string]int
	closed     bool
}

// New starts a fake on loopback.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Farm == nil || opts.APIKey == "" {
		return nil, errors.New("daytonafake: Options.Farm and Options.APIKey are required")
	}
	if opts.Quota.CPU == 0 {
		opts.Quota.CPU = 10
	}
	if opts.Quota.MemoryGiB == 0 {
		opts.Quota.MemoryGiB = 10
	}
	if opts.Quota.DiskGiB == 0 {
		opts.Quota.DiskGiB = 30
	}
	s := &Server{opts: opts, log: opts.Logger, orgID: opts.OrganizationID, minute: opts.Minute,
		sandboxes: map[string]*sandbox{}, requests: map[string]int{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.orgID == "" {
		s.orgID = newUUID()
	}
	if s.minute <= 0 {
		s.minute = time.Minute
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	base := "http://" + s.srv.Listener.Addr().String()
	var err error
	if s.apiRouter, err = loadRouter(ctx, "api-openapi.yaml", apiSpec, base+"/api"); err != nil {
		s.srv.Close()
		return nil, err
	}
	if s.toolboxRouter, err = loadRouter(ctx, "toolbox-openapi.yaml", toolboxSpec, base); err != nil {
		s.srv.Close()
		return nil, err
	}
	s.srv.Start()
	s.wg.Add(1)
	go s.reap()
	return s, nil
}

// loadRouter loads a document and routes it at base. Its examples are
// not checked: some are not of their schemas' types.
func loadRouter(ctx context.Context, name string, b []byte, base string) (routers.Router, error) {
	return apispec.Load(ctx, name, b, base, openapi3.DisableExamplesValidation())
}

// URL is the fake's base URL: the API is under /api, the toolbox under
// /toolbox, previews under /preview.
func (s *Server) URL() string { return s.srv.URL }

// APIURL is the control API's base URL, the SDK's DaytonaConfig.APIUrl.
func (s *Server) APIURL() string { return s.srv.URL + "/api" }

// ToolboxProxyURL is every sandbox's toolboxProxyUrl.
func (s *Server) ToolboxProxyURL() string { return s.srv.URL + "/toolbox" }

// OrganizationID is the organization of the fake's key.
func (s *Server) OrganizationID() string { return s.orgID }

// Close deletes every sandbox, removing its machine, and stops the fake.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
	s.cancel()
	for _, sb := range all {
		s.remove(sb, "the fake closed")
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

// Violations returns what broke the documents so far, requests and
// answers, and forgets it.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.violations
	s.violations = nil
	return v
}

// Requests says how many requests the fake has had for an operation: the
// API's as "METHOD <path in api-openapi.yaml>" ("POST /sandbox", "GET
// /sandbox/{sandboxIdOrName}"), the toolbox's as "METHOD
// /toolbox/{sandboxId}<path in toolbox-openapi.yaml>" ("POST
// /toolbox/{sandboxId}/process/execute"), "preview" for the preview
// proxy's, and "unauthorized" for those refused for their key.
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

func (s *Server) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Warn("daytonafake: spec violation", "violation", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, msg)
}

// AllRequests is how many requests the fake has received, of every
// operation: the round trips its clients made.
func (s *Server) AllRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.requests {
		n += c
	}
	return n
}

func (s *Server) count(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
}

// fault takes the first fault matching a request of op.
func (s *Server) fault(op string, r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if (f.Op == "" || f.Op == op) && (f.Match == nil || f.Match(r)) {
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

// serve routes every request: the API, the toolbox, the previews.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.opts.Latency > 0 {
		select {
		case <-time.After(s.opts.Latency):
		case <-r.Context().Done():
			return
		}
	}
	switch p := r.URL.Path; {
	case p == "/api" || strings.HasPrefix(p, "/api/"):
		s.serveAPI(w, r)
	case strings.HasPrefix(p, "/toolbox/"):
		s.serveToolbox(w, r)
	case strings.HasPrefix(p, "/preview/"):
		s.servePreview(w, r)
	default:
		s.count("unrouted")
		http.NotFound(w, r)
	}
}

// authorized checks the request's key and organization, answering when
// they are wrong.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, writeErr func(http.ResponseWriter, *http.Request, int, string)) bool {
	if r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
		s.count("unauthorized")
		writeErr(w, r, http.StatusUnauthorized, "Unauthorized")
		return false
	}
	if org := r.Header.Get("X-Daytona-Organization-ID"); org != "" && org != s.orgID {
		s.count("unauthorized")
		writeErr(w, r, http.StatusForbidden, "Forbidden resource")
		return false
	}
	return true
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
// router's document, then writes the answer, or loses it as a fault
// says. prefix goes before the document's path in the operation's name.
// With stream, h writes straight to w, unchecked: a WebSocket's answer.
func (s *Server) validated(w http.ResponseWriter, r *http.Request, router routers.Router, prefix string, writeErr func(http.ResponseWriter, *http.Request, int, string), h func(http.ResponseWriter, *http.Request, map[string]string)) {
	route, params, err := router.FindRoute(r)
	if err != nil {
		s.violation("%s %s: no such operation in the spec: %v", r.Method, r.URL.Path, err)
		writeErr(w, r, http.StatusNotFound, "Cannot "+r.Method+" "+r.URL.Path)
		return
	}
	op := r.Method + " " + prefix + route.Path
	s.count(op)
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		s.violation("request %s %s: %s", r.Method, r.URL.Path, firstLine(err))
		s.respond(w, r, in, nil, func(w http.ResponseWriter) {
			writeErr(w, r, http.StatusBadRequest, "request does not follow the spec: "+firstLine(err))
		})
		return
	}
	f := s.fault(op, r)
	if f == nil && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		h(w, r, params)
		return
	}
	s.respond(w, r, in, f, func(w http.ResponseWriter) {
		if f != nil && !f.Drop {
			if f.RetryAfter != "" {
				w.Header().Set("Retry-After", f.RetryAfter)
			}
			writeErr(w, r, f.Status, http.StatusText(f.Status))
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
		writeAPIError(rec, r, http.StatusInternalServerError, "the fake's answer broke the spec")
	}
	if f != nil && f.Drop {
		dropConn(w)
		return
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// dropConn closes the request's connection without an answer.
func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// writeAPIError writes an error as Daytona's API does (its
// AllExceptionsFilter).
func writeAPIError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	writeJSON(w, code, map[string]any{
		"path": r.URL.RequestURI(), "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"statusCode": code, "error": http.StatusText(code), "message": msg,
	})
}

// writeToolboxError writes an error as Daytona's daemon and proxy do
// (their ErrorResponse).
func writeToolboxError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	writeJSON(w, code, map[string]any{
		"statusCode": code, "message": msg, "code": http.StatusText(code),
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "path": r.URL.Path, "method": r.Method,
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON request body the validator has checked.
func decode(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(v)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
