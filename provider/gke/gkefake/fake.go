// Package gkefake is a fake of a Kubernetes cluster running the
// agent-sandbox controller (GKE Agent Sandbox, or any cluster with it),
// for tests: a minimal Kubernetes API for the controller's resources, a
// loop standing in for the controller, the sandbox router with a
// runtime behind it, and the API server's port forward to a sandbox's
// pod, all on loopback, with every sandbox's pod a real machine of
// package provider/remote/remotefake where commands run for real.
//
// It is built on, and checked against, the module
// sigs.k8s.io/agent-sandbox v0.5.6: its types (api/v1beta1,
// extensions/api/v1beta1) and the object trackers of its fake clientsets
// (clients/k8s/clientset and clients/k8s/extensions/clientset) hold the
// objects; the controllers' sources (controllers/,
// extensions/controllers/) say what the loop does; the sandbox router's
// (sandbox-router/) how requests are routed; the example runtime's
// (examples/python-runtime-sandbox) what /execute, /upload and
// /download do. Its tests drive it through that module's typed
// clientsets and its runtime client (clients/go/sandbox), and through
// k8s.io/client-go v0.36.3's SPDY port forward.
//
// # The Kubernetes API
//
// [Server.Kubeconfig] writes a kubeconfig for the API's loopback URL with
// a bearer token that every request must carry (401 otherwise). It
// serves, in one namespace or any:
//
//   - /apis/agents.x-k8s.io/v1beta1/namespaces/NS/sandboxes[/NAME]
//   - /apis/extensions.agents.x-k8s.io/v1beta1/namespaces/NS/{sandboxclaims,sandboxtemplates,sandboxwarmpools}[/NAME]
//
// with GET, LIST (labelSelector, fieldSelector metadata.name, limit and
// continue), WATCH (?watch=true), POST, PUT and DELETE, and
// POST /api/v1/namespaces/NS/pods/NAME/portforward (SPDY, protocol
// portforward.k8s.io). Bodies are decoded strictly into the module's
// types: an unknown field, a wrong kind or apiVersion, a bad name or
// label, a claim with no warm pool, a path or method not listed is
// answered as the API server would (400, 404, 405, 422) and recorded
// ([Server.Violations]). Errors are metav1.Status objects, so the
// clients' apierrors read them.
//
// # The controller
//
// A claim names a SandboxWarmPool, which names a SandboxTemplate (as in
// v1beta1). The loop makes, for a new claim, a Sandbox named like the
// claim, owned by it, from the template's blueprint, with the claim's
// identity labels (agents.x-k8s.io/claim-uid, created-by) and its
// additionalPodMetadata on the pod template (checked as the controller
// checks it: pod labels of the domain sandbox.users.io only, no
// annotation of a system domain; else Ready=False, InvalidMetadata), and
// a machine for its pod;
// it then sets the Sandbox's status (serviceFQDN, service, podIPs,
// selector, the Ready condition with reason DependenciesReady) and the
// claim's (status.sandbox.name and podIPs, Ready). A missing pool or
// template leaves the claim Ready=False with reason WarmPoolNotFound or
// TemplateNotFound. Deleting a claim deletes its Sandbox (the garbage
// collector's cascade); deleting a Sandbox ends its machine. A claim past
// spec.lifecycle.shutdownTime is deleted (policy Delete) or its Sandbox
// (Retain); with Options.LeakOnExpiry the claim goes and its Sandbox and
// machine stay behind, orphaned, as users of the controller report.
//
// # The router and the runtime
//
// [Server.RouterURL] is the sandbox router: a request names its sandbox
// by X-Sandbox-ID (a DNS label; X-Sandbox-Namespace defaults to
// "default", X-Sandbox-Port to 8888). Port 8888 is the runtime, which the
// fake serves itself over the machine: POST /execute runs the command,
// split as shlex splits it, as root in /app, and answers stdout, stderr
// and exit_code; POST /upload (multipart, field "file") writes a plain
// file name in /app; GET /download/PATH reads a file under /app. Any
// other port is proxied to that port in the machine, with Authorization
// removed, as the router does.
//
// Faults are injected with [Server.Inject] (a status, with Retry-After,
// a number of times, an answer lost after the work is done), machines
// lost with [Server.Vanish], latency with Options.Latency, a quota of
// claims with Options.MaxClaims (403 "exceeded quota"); requests are
// counted per operation ([Server.Requests]).
package gkefake

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agentsfake "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned/fake"
	extfake "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned/fake"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// Options configure a Server.
type Options struct {
	// Farm makes the sandboxes' machines. Required.
	Farm *remotefake.Farm
	// Token is the bearer token the API requires. Required.
	Token string
	// Latency delays every request: the API's, the router's and the
	// port forward's (once per connection).
	Latency time.Duration
	// MaxClaims bounds the claims of a namespace, as a ResourceQuota on
	// count/sandboxclaims would; zero means no bound.
	MaxClaims int
	// LeakOnExpiry makes an expired claim go without its Sandbox, which
	// stays, orphaned, with its machine.
	LeakOnExpiry bool
	// ReadyDelay is how long a new Sandbox waits, after its machine is
	// up, before it is Ready.
	ReadyDelay time.Duration
	// ImageFiles are files every machine has from the start, as the
	// template's image would: the path in the machine to the path on
	// this host (a daemon baked into the image, say), mode 0755.
	ImageFiles map[string]string
	// Tick is how often the controller looks at expiry; zero means 50 ms.
	Tick time.Duration
	// Logger receives what the fake does; nil means slog.Default().
	Logger *slog.Logger
}

// Fault is an injected failure: the next Times requests of operation Op
// ("create sandboxclaims", "get sandboxes", "execute", "upload",
// "portforward", ...; empty means any) are answered Status (with
// Retry-After and Message when set), or, with Drop, done in full and
// their answer lost: the connection closes instead.
type Fault struct {
	Op         string
	Status     int
	Message    string
	RetryAfter string
	Drop       bool
	// Times is how many requests it hits; zero means one.
	Times int
}

// Server is a running fake.
type Server struct {
	opts Options
	log  *slog.Logger

	agents *agentsfake.Clientset
	ext    *extfake.Clientset

	api    *httptest.Server
	router *httptest.Server

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	machines   map[string]*remotefake.Machine // by namespace/sandbox name
	faults     []*Fault
	violations []string
	requests   map[string]int
	seq        int
}

// Resources the fake serves.
var (
	sandboxesGVR  = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	claimsGVR     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	templatesGVR  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	warmpoolsGVR  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	resourceKinds = map[string]string{
		"sandboxes": "Sandbox", "sandboxclaims": "SandboxClaim",
		"sandboxtemplates": "SandboxTemplate", "sandboxwarmpools": "SandboxWarmPool",
	}
)

// New starts a fake on loopback, its controller running until Close.
func New(ctx context.Context, opts Options) (*Server, error) {
	if opts.Farm == nil || opts.Token == "" {
		return nil, errors.New("gkefake: Options.Farm and Options.Token are required")
	}
	if opts.Tick <= 0 {
		opts.Tick = 50 * time.Millisecond
	}
	s := &Server{
		opts: opts, log: opts.Logger,
		agents: agentsfake.NewSimpleClientset(), ext: extfake.NewSimpleClientset(),
		machines: map[string]*remotefake.Machine{}, requests: map[string]int{},
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.startController(); err != nil {
		s.cancel()
		return nil, err
	}
	// TLS, as client-go sends a bearer token over nothing else.
	s.api = httptest.NewTLSServer(http.HandlerFunc(s.serveAPI))
	s.router = httptest.NewServer(http.HandlerFunc(s.serveRouter))
	return s, nil
}

// URL is the Kubernetes API's base URL (https, its certificate in the
// kubeconfig Kubeconfig writes).
func (s *Server) URL() string { return s.api.URL }

// RouterURL is the sandbox router's base URL.
func (s *Server) RouterURL() string { return s.router.URL }

// Kubeconfig writes a kubeconfig for the API, with the fake's token and
// the context named context, to path, mode 0600.
func (s *Server) Kubeconfig(path, context string) error {
	cfg := clientcmdapi.NewConfig()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.api.Certificate().Raw})
	cfg.Clusters["fake"] = &clientcmdapi.Cluster{Server: s.api.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["fake"] = &clientcmdapi.AuthInfo{Token: s.opts.Token}
	cfg.Contexts[context] = &clientcmdapi.Context{Cluster: "fake", AuthInfo: "fake", Namespace: "default"}
	cfg.CurrentContext = context
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// Close stops the fake and ends every machine it made.
func (s *Server) Close() {
	s.api.CloseClientConnections()
	s.router.CloseClientConnections()
	s.api.Close()
	s.router.Close()
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	ms := s.machines
	s.machines = map[string]*remotefake.Machine{}
	s.mu.Unlock()
	for _, m := range ms {
		_ = m.Destroy(context.Background())
	}
}

// Inject adds a fault.
func (s *Server) Inject(f Fault) {
	if f.Times <= 0 {
		f.Times = 1
	}
	s.mu.Lock()
	s.faults = append(s.faults, &f)
	s.mu.Unlock()
}

// Violations are the requests that broke the API, the router's contract
// or the runtime's, one line each.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Requests counts the requests of operation op received ("create
// sandboxclaims", "execute", ...).
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[op]
}

// AllRequests counts every request received: the API's, the router's
// and each port-forwarded connection.
func (s *Server) AllRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.requests {
		n += c
	}
	return n
}

func (s *Server) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.log.Warn("gkefake: violation", "what", msg)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
}

// begin counts a request of op, waits the latency, and returns the fault
// it meets, if any.
func (s *Server) begin(op string) *Fault {
	if s.opts.Latency > 0 {
		time.Sleep(s.opts.Latency)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests[op]++
	for i, f := range s.faults {
		if f.Op == "" || f.Op == op {
			f.Times--
			if f.Times <= 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
			return f
		}
	}
	return nil
}

// failed answers the fault f, unless it is a lost answer (Drop), and
// says whether it did.
func failed(w http.ResponseWriter, f *Fault, gr schema.GroupResource, name string) bool {
	if f == nil || f.Drop {
		return false
	}
	if f.RetryAfter != "" {
		w.Header().Set("Retry-After", f.RetryAfter)
	}
	msg := f.Message
	if msg == "" {
		msg = http.StatusText(f.Status)
	}
	se := statusError(f.Status, msg, gr, name)
	if n, err := strconv.Atoi(f.RetryAfter); err == nil && se.ErrStatus.Details != nil && f.Status == http.StatusTooManyRequests {
		se.ErrStatus.Details.RetryAfterSeconds = int32(n)
	}
	writeStatus(w, se)
	return true
}

// statusError is what the API server answers with code.
func statusError(code int, msg string, gr schema.GroupResource, name string) *apierrors.StatusError {
	switch code {
	case http.StatusNotFound:
		return apierrors.NewNotFound(gr, name)
	case http.StatusConflict:
		return apierrors.NewAlreadyExists(gr, name)
	case http.StatusUnauthorized:
		return apierrors.NewUnauthorized(msg)
	case http.StatusForbidden:
		return apierrors.NewForbidden(gr, name, errors.New(msg))
	case http.StatusTooManyRequests:
		return apierrors.NewTooManyRequests(msg, 1)
	case http.StatusUnprocessableEntity:
		return apierrors.NewInvalid(schema.GroupKind{Group: gr.Group, Kind: resourceKinds[gr.Resource]}, name, nil)
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(msg)
	case http.StatusServiceUnavailable:
		return apierrors.NewServiceUnavailable(msg)
	}
	return apierrors.NewGenericServerResponse(code, "", gr, name, msg, 0, true)
}

func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	st := err.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	w.Header().Set("Content-Type", "application/json")
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	w.WriteHeader(int(st.Code))
	_ = json.NewEncoder(w).Encode(st)
}

// dropConn closes the connection of w without an answer.
func dropConn(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func machineKey(ns, name string) string { return ns + "/" + name }

// Machine is the machine of the pod of sandbox name in namespace ns.
func (s *Server) Machine(ns, name string) (*remotefake.Machine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.machines[machineKey(ns, name)]
	return m, ok
}

// Vanish ends the machine of sandbox name's pod out of band, as a node
// lost would: its Sandbox stays, no longer Ready.
func (s *Server) Vanish(ns, name string) {
	s.mu.Lock()
	m, ok := s.machines[machineKey(ns, name)]
	delete(s.machines, machineKey(ns, name))
	s.mu.Unlock()
	if ok {
		_ = m.Destroy(context.Background())
	}
	s.setSandboxReady(ns, name, false, "PodNotReady")
}

// metaNow is the time as the API server writes it.
func metaNow() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }

// AddTemplate adds a SandboxTemplate named name to namespace ns, and a
// SandboxWarmPool of the same name, of no replicas, naming it: what an
// operator applies before claims can name the pool.
func (s *Server) AddTemplate(ns, name string) error {
	t := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: newUIDType(), CreationTimestamp: metaNow()}}
	t.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "runtime", Image: remotefake.DefaultImage}}
	s.stamp(t)
	if err := s.ext.Tracker().Create(templatesGVR, t, ns); err != nil {
		return err
	}
	p := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: newUIDType(), CreationTimestamp: metaNow()}}
	p.Spec.Replicas = ptr.To(int32(0))
	p.Spec.TemplateRef.Name = name
	s.stamp(p)
	return s.ext.Tracker().Create(warmpoolsGVR, p, ns)
}

// Sandboxes lists the names of the Sandboxes of namespace ns.
func (s *Server) Sandboxes(ns string) []string {
	list, err := s.agents.Tracker().List(sandboxesGVR, sandboxesGVR.GroupVersion().WithKind("Sandbox"), ns)
	if err != nil {
		return nil
	}
	var out []string
	for _, sb := range list.(*sandboxv1beta1.SandboxList).Items {
		out = append(out, sb.Name)
	}
	return out
}
