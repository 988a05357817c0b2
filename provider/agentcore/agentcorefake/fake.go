// Package agentcorefake is a fake of Amazon Bedrock AgentCore's Code
// Interpreter data plane for tests: the five operations berth uses,
// served over loopback as the official Go SDK sends them, with every
// session a real machine of package provider/remote/remotefake where
// commands run for real.
//
// It follows the SDK github.com/aws/aws-sdk-go-v2/service/bedrockagentcore
// v1.59.0 (its operation schemas in schemas/schemas.go: methods, paths,
// headers and JSON members, the restJson1 protocol of
// github.com/aws/smithy-go v1.28.9) and the service's API reference
// (limits: a session's name 1-100 characters, its timeout 1 s to 8 h,
// default 900 s; a client token of 33-256 characters; 1-100 results a
// page of ListCodeInterpreterSessions):
//
//   - PUT /code-interpreters/{id}/sessions/start
//     (StartCodeInterpreterSession): a machine made, READY; a client
//     token seen before answers the session it made, as the service
//     does. The session ends, TERMINATED, at its sessionTimeoutSeconds.
//   - GET /code-interpreters/{id}/sessions/get?sessionId= and POST
//     .../sessions/list (paginated, a status filter).
//   - PUT /code-interpreters/{id}/sessions/stop?sessionId=.
//   - POST /code-interpreters/{id}/tools/invoke, the session in the
//     header x-amzn-code-interpreter-session-id (InvokeCodeInterpreter),
//     answered as an event stream (application/vnd.amazon.eventstream)
//     that the SDK's own encoder writes
//     (github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream v1.7.27):
//     one "result" event, a CodeInterpreterResult as JSON. Its tools:
//     executeCommand (sh -c, as root, in /; stdout, stderr and the exit
//     code in structuredContent), startCommandExecution, getTask and
//     stopTask (a detached command), writeFiles (text or base64 blob;
//     parents made), readFiles, listFiles, removeFiles, executeCode
//     (python).
//
// Every request must be signed with Signature Version 4 for the service
// bedrock-agentcore by the fake's access key: the signature is computed
// again with the SDK's own signer (aws/signer/v4) and compared. A
// request that breaks the API (a path, a member, a limit) is answered
// ValidationException and recorded ([Server.Violations]).
//
// Errors are answered as the service does, the error's name in
// X-Amzn-ErrorType and {"message": ...} as the body. Faults are injected
// with [Server.Inject] (an exception, or an answer lost after the work
// was done), latency with Options.Latency, the end of a session with
// [Server.Vanish]; Options.MaxSessions is the account's quota.
package agentcorefake

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// Service is the signing name of the service.
const Service = "bedrock-agentcore"

// DefaultIdentifier is the code interpreter AWS provides.
const DefaultIdentifier = "aws.codeinterpreter.v1"

// MaxTimeout is the longest session: 8 hours.
const MaxTimeout = 8 * time.Hour

// Options configure a Server.
type Options struct {
	// Farm makes the sessions' machines. Required.
	Farm *remotefake.Farm
	// AccessKeyID and SecretAccessKey are the only credentials the fake
	// accepts. Required.
	AccessKeyID, SecretAccessKey string
	// Identifiers are the code interpreters the fake knows; empty means
	// DefaultIdentifier alone.
	Identifiers []string
	// MaxSessions bounds the READY sessions at once
	// (ServiceQuotaExceededException past it); zero means 100.
	MaxSessions int
	// MaxTimeout bounds a session's timeout; zero means MaxTimeout (8
	// h), the service's.
	MaxTimeout time.Duration
	// Latency delays every request.
	Latency time.Duration
	// MaxOutput bounds what executeCommand returns of each stream; zero
	// means 16 MiB.
	MaxOutput int
	// Logger receives what the fake does; nil means slog.Default().
	Logger *slog.Logger
}

// Fault is an injected failure: the next Times requests of Op (an
// operation, "StartCodeInterpreterSession", or a tool of
// InvokeCodeInterpreter, "executeCommand"; empty means any) that Match
// (when set) picks are answered Exception (a name of the API's errors:
// "ThrottlingException", with its status), or, with Drop, handled in
// full and their answer lost: the connection closes instead.
type Fault struct {
	Op        string
	Match     func(*http.Request) bool
	Exception string
	Message   string
	Drop      bool
	// Times is how many requests it hits; zero means one.
	Times int
}

// statuses are the API's errors' HTTP statuses (their httpError traits).
var statuses = map[string]int{
	"AccessDeniedException":         403,
	"ConflictException":             409,
	"InternalServerException":       500,
	"ResourceNotFoundException":     404,
	"ServiceQuotaExceededException": 402,
	"ThrottlingException":           429,
	"ValidationException":           400,
	"UnauthorizedException":         401,
	// Not the model's, but the gateway's for a key it does not know.
	"UnrecognizedClientException": 403,
	"InvalidSignatureException":   403,
}

// Server is a running fake.
type Server struct {
	opts Options
	log  *slog.Logger
	srv  *httptest.Server

	mu         sync.Mutex
	sessions   map[string]*session // by id
	tokens     map[string]string   // client token -> session id
	faults     []*Fault
	violations []string
	requests   map[string]int
	commands   []string // the last maxCommands commands run, for Commands
	closed     bool
	wg         sync.WaitGroup
}

// New starts a fake on loopback.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Farm == nil || opts.AccessKeyID == "" || opts.SecretAccessKey == "" {
		return nil, errors.New("agentcorefake: Options.Farm and the credentials are required")
	}
	if len(opts.Identifiers) == 0 {
		opts.Identifiers = []string{DefaultIdentifier}
	}
	if opts.MaxSessions == 0 {
		opts.MaxSessions = 100
	}
	if opts.MaxTimeout == 0 {
		opts.MaxTimeout = MaxTimeout
	}
	if opts.MaxOutput == 0 {
		opts.MaxOutput = 16 << 20
	}
	s := &Server{opts: opts, log: opts.Logger, sessions: map[string]*session{}, tokens: map[string]string{}, requests: map[string]int{}}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	return s, nil
}

// URL is the endpoint to give the SDK (Options.BaseEndpoint).
func (s *Server) URL() string { return s.srv.URL }

// Close ends every session and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*session, 0, len(s.sessions))
	for _, ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	s.srv.CloseClientConnections()
	s.srv.Close()
	for _, ss := range all {
		s.end(ss, "the fake closed")
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

// Violations returns what broke the API so far, and forgets it.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.violations
	s.violations = nil
	return v
}

// Requests says how many requests the fake has had of an operation
// ("StartCodeInterpreterSession") or of a tool of InvokeCodeInterpreter
// ("executeCommand", counted in "InvokeCodeInterpreter" too), and
// "unauthorized" for those refused for their signature.
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

// AllRequests is how many requests the fake has received: the round
// trips its clients made.
func (s *Server) AllRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for op, c := range s.requests {
		if !tools[op] {
			n += c
		}
	}
	return n
}

func (s *Server) count(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
}

func (s *Server) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Warn("agentcorefake: API violation", "violation", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, msg)
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

var routeRE = regexp.MustCompile(`^/code-interpreters/([^/]+)/(sessions/start|sessions/get|sessions/list|sessions/stop|tools/invoke)$`)

// operations by method and route.
var operations = map[string]string{
	"PUT sessions/start": "StartCodeInterpreterSession",
	"GET sessions/get":   "GetCodeInterpreterSession",
	"POST sessions/list": "ListCodeInterpreterSessions",
	"PUT sessions/stop":  "StopCodeInterpreterSession",
	"POST tools/invoke":  "InvokeCodeInterpreter",
}

// maxBody bounds a request's body: a writeFiles of 100 MB inline, in
// JSON's base64.
const maxBody = 140 << 20

// request is one request as the handlers see it.
type request struct {
	r    *http.Request
	body []byte
	ci   string // the code interpreter
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.opts.Latency > 0 {
		select {
		case <-time.After(s.opts.Latency):
		case <-r.Context().Done():
			return
		}
	}
	m := routeRE.FindStringSubmatch(r.URL.EscapedPath())
	op := ""
	if m != nil {
		op = operations[r.Method+" "+m[2]]
	}
	if op == "" {
		s.count("unrouted")
		s.violation("%s %s: no operation of the API", r.Method, r.URL.Path)
		writeError(w, "UnknownOperationException", 404, "no such operation")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return
	}
	if len(body) > maxBody {
		s.count(op)
		writeError(w, "ValidationException", 413, "request too large")
		return
	}
	if !s.signed(w, r, body) {
		return
	}
	s.count(op)
	req := &request{r: r, body: body, ci: m[1]}
	if !s.knows(req.ci) {
		writeError(w, "ResourceNotFoundException", 404, "code interpreter "+req.ci+" not found")
		return
	}
	var tool string
	if op == "InvokeCodeInterpreter" {
		var in struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(body, &in)
		tool = in.Name
		if tools[tool] {
			s.count(tool)
		}
	}
	f := s.fault(op, r)
	if f == nil && tool != "" {
		f = s.fault(tool, r)
	}
	if f != nil && !f.Drop {
		st, ok := statuses[f.Exception]
		if !ok {
			st = 500
		}
		msg := f.Message
		if msg == "" {
			msg = "injected " + f.Exception
		}
		writeError(w, f.Exception, st, msg)
		return
	}
	rec := httptest.NewRecorder()
	switch op {
	case "StartCodeInterpreterSession":
		s.start(rec, req)
	case "GetCodeInterpreterSession":
		s.get(rec, req)
	case "ListCodeInterpreterSessions":
		s.list(rec, req)
	case "StopCodeInterpreterSession":
		s.stop(rec, req)
	case "InvokeCodeInterpreter":
		s.invoke(rec, req)
	}
	if f != nil && f.Drop {
		// The work is done; the answer is lost.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, vs := range rec.Header() {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

func (s *Server) knows(ci string) bool {
	for _, id := range s.opts.Identifiers {
		if id == ci {
			return true
		}
	}
	return false
}

// signed checks the request's Signature Version 4 by signing it again
// with the SDK's signer, answering when it is wrong.
func (s *Server) signed(w http.ResponseWriter, r *http.Request, body []byte) bool {
	refuse := func(code, why string) bool {
		s.count("unauthorized")
		writeError(w, code, statuses[code], why)
		return false
	}
	auth := r.Header.Get("Authorization")
	const algo = "AWS4-HMAC-SHA256 "
	if !strings.HasPrefix(auth, algo) {
		return refuse("UnrecognizedClientException", "missing authentication token")
	}
	fields := map[string]string{}
	for _, part := range strings.Split(strings.TrimPrefix(auth, algo), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != Service || scope[4] != "aws4_request" {
		return refuse("InvalidSignatureException", "bad credential scope")
	}
	if scope[0] != s.opts.AccessKeyID {
		return refuse("UnrecognizedClientException", "The security token included in the request is invalid.")
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil || time.Since(at).Abs() > 5*time.Minute {
		return refuse("InvalidSignatureException", "Signature expired or X-Amz-Date missing")
	}
	again, err := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return refuse("InvalidSignatureException", "bad request")
	}
	again.Host = r.Host
	again.ContentLength = r.ContentLength
	for _, h := range strings.Split(fields["SignedHeaders"], ";") {
		switch h {
		case "host":
		case "content-length":
			again.Header.Set("Content-Length", strconv.FormatInt(r.ContentLength, 10))
		default:
			if vs := r.Header.Values(h); len(vs) > 0 {
				again.Header[http.CanonicalHeaderKey(h)] = vs
			}
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: s.opts.AccessKeyID, SecretAccessKey: s.opts.SecretAccessKey}
	if err := v4.NewSigner().SignHTTP(r.Context(), creds, again, hex.EncodeToString(sum[:]), Service, scope[2], at); err != nil {
		return refuse("InvalidSignatureException", "cannot sign")
	}
	want := again.Header.Get("Authorization")
	if want != auth {
		return refuse("InvalidSignatureException", "The request signature we calculated does not match the signature you provided.")
	}
	return true
}

func writeError(w http.ResponseWriter, code string, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads the request's JSON body strictly: a member the API does
// not name is a violation.
func (s *Server) decode(w http.ResponseWriter, req *request, v any) bool {
	if len(bytes.TrimSpace(req.body)) == 0 {
		return true
	}
	d := json.NewDecoder(bytes.NewReader(req.body))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		s.violation("%s %s: body: %v", req.r.Method, req.r.URL.Path, err)
		writeError(w, "ValidationException", 400, "malformed request: "+err.Error())
		return false
	}
	return true
}

func (s *Server) invalid(w http.ResponseWriter, req *request, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.violation("%s %s: %s", req.r.Method, req.r.URL.Path, msg)
	writeError(w, "ValidationException", 400, msg)
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxCommands bounds what Commands keeps.
const maxCommands = 1000

// Commands returns the text of the last commands executeCommand and
// startCommandExecution ran (at most 1000), oldest first: what a
// session's process list could show.
func (s *Server) Commands() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.commands...)
}

func (s *Server) ran(cmd string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.commands) == maxCommands {
		s.commands = s.commands[1:]
	}
	s.commands = append(s.commands, cmd)
}

// Sessions lists the ids of the sessions that are READY.
func (s *Server) Sessions() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, ss := range s.sessions {
		if ss.status == statusReady {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}
