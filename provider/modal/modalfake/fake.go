// Package modalfake is a fake of Modal for tests: its control plane (the
// gRPC service modal.client.ModalClient) and its task command router
// (modal.task_command_router.TaskCommandRouter, through which commands
// run in a sandbox), served over loopback, with every sandbox a real
// machine of package provider/remote/remotefake where commands run for
// real, and every encrypted port a TLS tunnel on loopback.
//
// It is built on the protocol of Modal's official Go SDK,
// github.com/modal-labs/modal-client/go v0.11.1: its generated types and
// server interfaces (package proto/modal_proto), and the semantics its
// calls rely on, read from the SDK's sources (sandbox.go,
// task_command_router_client.go, image.go, app.go, client.go) and its
// own tests' fake worker (test/fake_worker_test.go). That API is not
// public and changes between releases; the fake follows that version.
// Its own tests drive it through the SDK.
//
// # Reaching it
//
// The SDK takes the control plane's address from $MODAL_SERVER_URL as a
// client is made: [Server.URL] is "http://127.0.0.1:PORT", which the SDK
// dials without TLS. The command router's URL, given with each sandbox,
// is "https://127.0.0.1:PORT"; the SDK dials a router without TLS when
// the server URL is a loopback address, so the router is served
// plaintext. A tunnel's URL is always https to the SDK
// (Tunnel.URL): the fake serves each tunnel with TLS, its certificate
// signed by a CA of its own ([Server.CAFile], [Server.CAPEM]), and
// forwards the bytes to the port of the sandbox's machine.
//
// # What it checks
//
// Every call of the control plane must carry the token's id and secret
// (x-modal-token-id, x-modal-token-secret) and the client's type, and
// every call but AuthTokenGet the auth token the fake issued
// (x-modal-auth-token); every call of the router the sandbox's JWT
// (authorization: Bearer). A call that lacks them is refused
// (Unauthenticated) and counted as "unauthenticated". A method the fake
// does not implement answers Unimplemented and is recorded as a
// violation ([Server.Violations]), as is a request that breaks what the
// SDK would send (an exec's PTY, a secret by id, an unencrypted port).
//
// # Semantics
//
// Apps are made on AppGetOrCreate with CREATE_IF_MISSING; every image
// reference builds at once into the farm's image. A sandbox is made at
// SandboxCreateV2 with its tags, its name unique among the app's running
// sandboxes (AlreadyExists), its resources bounded by [Quota]
// (ResourceExhausted), and ends at its timeout (every process and its
// machine gone) or at SandboxTerminateV2. SandboxListV2 pages by
// creation time, newest first, Options.PageSize a page. Commands run as
// root, as in Modal's sandboxes; their output is kept (up to 64 MiB a
// stream) and read again from any offset, their input written at
// offsets, so that the SDK's retries neither lose nor repeat bytes.
//
// TaskSnapshotFilesystem saves the sandbox's filesystem beyond the
// farm's image (remotefake.Machine.SaveFilesystem) as an image that
// lives for the request's TTL; ImageFromId finds it, ImageDelete drops
// it, and SandboxCreateV2 of it restores the filesystem into the new
// sandbox's machine before it answers.
//
// Faults are injected with [Server.Inject] (a status code, with a retry
// policy detail when set, or the work done and its answer lost; a Hold
// on TaskSnapshotFilesystem makes a snapshot outlast the SDK's
// timeout), [Server.Vanish] loses a sandbox, [Server.ExpireImage]
// expires a snapshot, and Options.Latency delays every call.
package modalfake

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// Quota bounds a workspace's running sandboxes: their number and their
// total CPU and memory requests. Zero fields mean no bound.
type Quota struct {
	Sandboxes int
	MilliCPU  int
	MemoryMiB int
}

// Options configure a Server.
type Options struct {
	// Farm makes the sandboxes' machines. Required.
	Farm *remotefake.Farm
	// TokenID and TokenSecret are the only token the fake accepts.
	// Required.
	TokenID, TokenSecret string
	// Quota bounds the running sandboxes.
	Quota Quota
	// PageSize is how many sandboxes a page of SandboxListV2 holds; zero
	// means 100.
	PageSize int
	// Latency delays every call, of the control plane and the router
	// alike (a stream's opening, not its messages), and every read of a
	// tunnel's client (so a request through it).
	Latency time.Duration
	// Logger receives what the fake does; nil means slog.Default().
	Logger *slog.Logger
}

// Fault is an injected failure: the next Times calls of Method (the
// method's name, "SandboxCreateV2", "TaskExecStart"; empty means any)
// are answered Code with Message, with Modal's retry policy detail when
// RetryAfter is set; or, with Drop, handled in full and answered
// Unavailable, as when the answer is lost on its way.
type Fault struct {
	Method     string
	Code       codes.Code
	Message    string
	RetryAfter time.Duration
	Drop       bool
	// Hold, when set, makes the call wait, before it is handled, until
	// Hold is closed (or the call's context ends), saying on Held (when
	// set, without blocking) that it waits; the call is then handled
	// as Code (when set) or Drop say, else normally.
	Hold <-chan struct{}
	Held chan<- struct{}
	// Skip is how many calls of Method pass before it hits.
	Skip int
	// Times is how many calls it hits; zero means one.
	Times int
}

// Server is a running fake.
type Server struct {
	opts Options
	log  *slog.Logger

	cp, rt      *grpc.Server
	cpL, rtL    net.Listener
	ca          *authority
	caFile      string
	authToken   string
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	mu          sync.Mutex
	apps        map[string]*app     // by name
	images      map[string][]string // by id: its Dockerfile commands
	fsImages    map[string]*fsImage // by id: the filesystem snapshots
	snapshotIDs map[string]string   // the image of each snapshot request's id
	sandboxes   map[string]*sandbox // by id
	tasks       map[string]*sandbox // by task id
	faults      []*Fault
	violations  []string
	requests    map[string]int
	closed      bool
	envID       string
}

type app struct {
	id, name string
}

// New starts a fake on loopback.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Farm == nil || opts.TokenID == "" || opts.TokenSecret == "" {
		return nil, errors.New("modalfake: Options.Farm, TokenID and TokenSecret are required")
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 100
	}
	s := &Server{opts: opts, log: opts.Logger, apps: map[string]*app{}, images: map[string][]string{},
		fsImages: map[string]*fsImage{}, snapshotIDs: map[string]string{},
		sandboxes: map[string]*sandbox{}, tasks: map[string]*sandbox{}, requests: map[string]int{},
		envID: "en-" + randomHex(8)}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.authToken = jwt(time.Now().Add(time.Hour), "auth")
	var err error
	if s.ca, err = newAuthority(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "modalfake-ca-")
	if err != nil {
		return nil, err
	}
	s.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(s.caFile, s.ca.pem, 0o644); err != nil {
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if s.cpL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	if s.rtL, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		s.cpL.Close()
		return nil, err
	}
	s.cp = grpc.NewServer(grpc.ChainUnaryInterceptor(s.unary(s.controlAuth)), grpc.ChainStreamInterceptor(s.stream(s.controlAuth)),
		grpc.MaxRecvMsgSize(100<<20))
	pb.RegisterModalClientServer(s.cp, &control{s: s})
	s.rt = grpc.NewServer(grpc.ChainUnaryInterceptor(s.unary(s.routerAuth)), grpc.ChainStreamInterceptor(s.stream(s.routerAuth)),
		grpc.MaxRecvMsgSize(100<<20))
	pb.RegisterTaskCommandRouterServer(s.rt, &router{s: s})
	go func() { _ = s.cp.Serve(s.cpL) }()
	go func() { _ = s.rt.Serve(s.rtL) }()
	return s, nil
}

// URL is the control plane's URL, for $MODAL_SERVER_URL.
func (s *Server) URL() string { return "http://" + s.cpL.Addr().String() }

// RouterURL is every sandbox's command router.
func (s *Server) RouterURL() string { return "https://" + s.rtL.Addr().String() }

// CAPEM is the certificate of the authority that signs the tunnels'.
func (s *Server) CAPEM() []byte { return s.ca.pem }

// CAFile is a file holding CAPEM, removed by Close.
func (s *Server) CAFile() string { return s.caFile }

// Close ends every sandbox, removing its machine, and stops the fake.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	all := make([]*sandbox, 0, len(s.sandboxes))
	for _, sb := range s.sandboxes {
		all = append(all, sb)
	}
	s.mu.Unlock()
	s.cancel()
	s.cp.Stop()
	s.rt.Stop()
	for _, sb := range all {
		s.end(sb, "the fake closed")
	}
	s.wg.Wait()
	os.RemoveAll(filepath.Dir(s.caFile))
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

// Violations returns what broke the protocol so far, and forgets it.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.violations
	s.violations = nil
	return v
}

// Requests says how many calls the fake has had of a method
// ("SandboxCreateV2", "TaskExecStart"), "tunnel" for the connections
// through tunnels, "tunnel-read" for the reads of their clients' bytes
// (about one a request), and "unauthenticated" for the calls refused.
func (s *Server) Requests(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[method]
}

// AllRequests is how many calls the fake has had, of every method, and
// reads through tunnels: the round trips its clients made.
func (s *Server) AllRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, c := range s.requests {
		if k != "unauthenticated" && k != "tunnel" {
			n += c
		}
	}
	return n
}

// Sandboxes is how many sandboxes are running.
func (s *Server) Sandboxes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sb := range s.sandboxes {
		if !sb.finished() {
			n++
		}
	}
	return n
}

func (s *Server) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Warn("modalfake: protocol violation", "violation", msg)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, msg)
}

func (s *Server) count(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
}

// fault takes the first fault of method.
func (s *Server) fault(method string) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, f := range s.faults {
		if f.Method == "" || f.Method == method {
			if f.Skip > 0 {
				f.Skip--
				continue
			}
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

// faultErr is the status a fault answers.
func faultErr(f *Fault) error {
	msg := f.Message
	if msg == "" {
		msg = "injected " + f.Code.String()
	}
	st := status.New(f.Code, msg)
	if f.RetryAfter > 0 {
		if d, err := st.WithDetails(pb.RPCRetryPolicy_builder{RetryAfterSecs: float32(f.RetryAfter.Seconds())}.Build()); err == nil {
			st = d
		}
	}
	return st.Err()
}

// methodName is the last element of a full gRPC method name.
func methodName(full string) string { return full[strings.LastIndex(full, "/")+1:] }

// unary wraps every unary call: latency, counting, auth, faults, and
// violations for what the fake does not implement.
func (s *Server) unary(auth func(ctx context.Context, method string) error) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		m := methodName(info.FullMethod)
		if err := s.enter(ctx, m, auth); err != nil {
			return nil, err
		}
		f := s.fault(m)
		if err := hold(ctx, f); err != nil {
			return nil, err
		}
		if f != nil && f.Code == codes.OK && !f.Drop {
			f = nil // a hold alone
		}
		if f != nil && !f.Drop {
			return nil, faultErr(f)
		}
		resp, err := h(ctx, req)
		if status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), "not implemented") {
			s.violation("%s: a method the fake does not implement", m)
		}
		if f != nil {
			return nil, status.Error(codes.Unavailable, "connection reset by peer (an injected lost answer)")
		}
		return resp, err
	}
}

func (s *Server) stream(auth func(ctx context.Context, method string) error) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		m := methodName(info.FullMethod)
		if err := s.enter(ss.Context(), m, auth); err != nil {
			return err
		}
		f := s.fault(m)
		if err := hold(ss.Context(), f); err != nil {
			return err
		}
		if f != nil && f.Code != codes.OK {
			return faultErr(f)
		}
		err := h(srv, ss)
		if status.Code(err) == codes.Unimplemented && strings.Contains(status.Convert(err).Message(), "not implemented") {
			s.violation("%s: a method the fake does not implement", m)
		}
		return err
	}
}

// hold waits as f's Hold says.
func hold(ctx context.Context, f *Fault) error {
	if f == nil || f.Hold == nil {
		return nil
	}
	if f.Held != nil {
		select {
		case f.Held <- struct{}{}:
		default:
		}
	}
	select {
	case <-f.Hold:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// enter delays, counts and authenticates a call.
func (s *Server) enter(ctx context.Context, m string, auth func(ctx context.Context, method string) error) error {
	if s.opts.Latency > 0 {
		select {
		case <-time.After(s.opts.Latency):
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	s.count(m)
	if err := auth(ctx, m); err != nil {
		s.count("unauthenticated")
		return err
	}
	return nil
}

// controlAuth checks a control plane call's metadata, as Modal's server
// reads what the SDK's interceptors add.
func (s *Server) controlAuth(ctx context.Context, m string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if first(md, "x-modal-client-type") == "" || first(md, "x-modal-client-version") == "" {
		s.violation("%s: no x-modal-client-type or x-modal-client-version", m)
	}
	if first(md, "x-modal-token-id") != s.opts.TokenID || first(md, "x-modal-token-secret") != s.opts.TokenSecret {
		return status.Error(codes.Unauthenticated, "Token ID or secret is invalid")
	}
	if m != "AuthTokenGet" && first(md, "x-modal-auth-token") != s.authToken {
		return status.Error(codes.Unauthenticated, "missing or invalid auth token")
	}
	return nil
}

// routerAuth checks a router call's JWT: that of a sandbox that runs.
func (s *Server) routerAuth(ctx context.Context, m string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	tok, ok := strings.CutPrefix(first(md, "authorization"), "Bearer ")
	if !ok {
		return status.Error(codes.Unauthenticated, "no bearer token")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sb := range s.sandboxes {
		if sb.jwt == tok {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "invalid JWT")
}

func first(md metadata.MD, k string) string {
	if v := md.Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}

// jwt is a token the SDK can read the expiry of; the fake compares
// tokens whole, so it needs no signature.
func jwt(exp time.Time, sub string) string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	p, _ := json.Marshal(map[string]any{"exp": exp.Unix(), "sub": sub, "jti": randomHex(8)})
	return h + "." + base64.RawURLEncoding.EncodeToString(p) + ".fake"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Counts is Requests of every method that had any.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.requests)
}

// IDs are the ids of the running sandboxes.
func (s *Server) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, sb := range s.sandboxes {
		if sb.machine != nil && !sb.finished() {
			ids = append(ids, id)
		}
	}
	return ids
}
