package gkefake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/utils/ptr"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agentsclient "sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	agentsclientset "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclientset "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/berth-dev/berth/provider/remote/remotefake"
)

const ns = "default"

// newFake starts a fake with a template "tmpl", closed at the test's
// end, when the test fails if a request broke the API.
func newFake(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Farm, opts.Token = farm, testToken
	s, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if v := s.Violations(); len(v) > 0 {
			t.Errorf("violations: %q", v)
		}
	})
	if err := s.AddTemplate(ns, "tmpl"); err != nil {
		t.Fatal(err)
	}
	return s
}

// restConfig is the official client's configuration from the fake's
// kubeconfig.
func restConfig(t *testing.T, s *Server) *rest.Config {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func clientsets(t *testing.T, rc *rest.Config) (agentsclientset.Interface, extclientset.Interface) {
	t.Helper()
	a, err := agentsclientset.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	e, err := extclientset.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return a, e
}

func newClaim(name string, labels map[string]string) *extv1beta1.SandboxClaim {
	return &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: extv1beta1.SandboxClaimSpec{
			WarmPoolRef:           extv1beta1.SandboxWarmPoolRef{Name: "tmpl"},
			AdditionalPodMetadata: sandboxv1beta1.PodMetadata{Annotations: labels},
		},
	}
}

// TestClaimLifecycle: through the official clientsets, a claim gets a
// Ready Sandbox it owns, with its labels on the pod template, and a
// machine; listing pages and selects; deleting the claim ends all.
func TestClaimLifecycle(t *testing.T) {
	s := newFake(t, Options{})
	agents, ext := clientsets(t, restConfig(t, s))
	claims := ext.ExtensionsV1beta1().SandboxClaims(ns)
	w, err := claims.Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=c1"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, n := range []string{"c1", "c2"} {
		if _, err := claims.Create(t.Context(), newClaim(n, map[string]string{"app": "berth", "n": n}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := claims.Create(t.Context(), newClaim("c1", nil), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("a second c1: %v", err)
	}
	var ready *extv1beta1.SandboxClaim
	timeout := time.After(time.Minute)
	for ready == nil {
		select {
		case ev := <-w.ResultChan():
			c, ok := ev.Object.(*extv1beta1.SandboxClaim)
			if !ok || c.Name != "c1" {
				t.Fatalf("watch event %v %T", ev.Type, ev.Object)
			}
			if apimeta.IsStatusConditionTrue(c.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady)) {
				ready = c
			}
		case <-timeout:
			t.Fatal("c1 never Ready")
		}
	}
	sb, err := agents.AgentsV1beta1().Sandboxes(ns).Get(t.Context(), ready.Status.SandboxStatus.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := metav1.GetControllerOf(sb); ref == nil || ref.UID != ready.UID {
		t.Errorf("sandbox's controller: %+v", ref)
	}
	if sb.Spec.PodTemplate.ObjectMeta.Annotations["n"] != "c1" || sb.Labels[extv1beta1.SandboxIDLabel] != string(ready.UID) || sb.Status.ServiceFQDN == "" {
		t.Errorf("sandbox %+v", sb.ObjectMeta)
	}
	if _, ok := s.Machine(ns, sb.Name); !ok {
		t.Fatal("no machine")
	}
	page, err := claims.List(t.Context(), metav1.ListOptions{LabelSelector: "app=berth", Limit: 1})
	if err != nil || len(page.Items) != 1 || page.Continue == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	next, err := claims.List(t.Context(), metav1.ListOptions{LabelSelector: "app=berth", Limit: 1, Continue: page.Continue})
	if err != nil || len(next.Items) != 1 || next.Continue != "" || next.Items[0].Name == page.Items[0].Name {
		t.Fatalf("second page: %+v, %v", next, err)
	}
	if l, err := claims.List(t.Context(), metav1.ListOptions{LabelSelector: "n=c2"}); err != nil || len(l.Items) != 1 {
		t.Errorf("n=c2: %+v, %v", l, err)
	}
	if err := claims.Delete(t.Context(), "c1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c1's sandbox and machine to go", func() bool {
		_, err := agents.AgentsV1beta1().Sandboxes(ns).Get(t.Context(), "c1", metav1.GetOptions{})
		_, ok := s.Machine(ns, "c1")
		return apierrors.IsNotFound(err) && !ok
	})
	if err := claims.Delete(t.Context(), "c1", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("delete of one gone: %v", err)
	}
	if n := s.Requests("create sandboxclaims"); n != 3 {
		t.Errorf("%d creates counted, want 3", n)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for range 300 {
		if ok() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("waited for %s in vain", what)
}

// TestRuntimeClient: the module's runtime client makes a claim, runs a
// command for real, writes and reads a file, and deletes the claim.
func TestRuntimeClient(t *testing.T) {
	s := newFake(t, Options{})
	c, err := agentsclient.NewClient(t.Context(), agentsclient.Options{APIURL: s.RouterURL(), RestConfig: restConfig(t, s), Quiet: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(t.Context(), "tmpl", ns)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sb.Run(t.Context(), `sh -c 'echo "$0" $((6*7)); echo err >&2; exit 3' hi`)
	if err != nil || res.Stdout != "hi 42\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
		t.Errorf("run: %+v, %v", res, err)
	}
	if err := sb.Write(t.Context(), "f.txt", []byte("some text")); err != nil {
		t.Fatal(err)
	}
	if b, err := sb.Read(t.Context(), "f.txt"); err != nil || string(b) != "some text" {
		t.Errorf("read: %q, %v", b, err)
	}
	if res, err := sb.Run(t.Context(), "pwd"); err != nil || res.Stdout != RuntimeDir+"\n" {
		t.Errorf("pwd: %+v, %v", res, err)
	}
	claim := sb.ClaimName()
	if err := sb.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the machine to go", func() bool { _, ok := s.Machine(ns, claim); return !ok })
	if s.Requests("execute") != 2 || s.Requests("upload") != 1 || s.Requests("download") != 1 {
		t.Errorf("runtime requests: %d execute, %d upload, %d download", s.Requests("execute"), s.Requests("upload"), s.Requests("download"))
	}
}

// TestPortForward: client-go's port forward reaches a port of the pod's
// machine; the router's proxy reaches it too, without Authorization.
func TestPortForward(t *testing.T) {
	s := newFake(t, Options{})
	rc := restConfig(t, s)
	_, ext := clientsets(t, rc)
	if _, err := ext.ExtensionsV1beta1().SandboxClaims(ns).Create(t.Context(), newClaim("pf", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var m *remotefake.Machine
	waitFor(t, "the machine", func() bool { mm, ok := s.Machine(ns, "pf"); m = mm; return ok })
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if err := m.WriteFile(t.Context(), RuntimeDir+"/srv", self, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := m.Start(t.Context(), remotefake.Command{Argv: []string{RuntimeDir + "/srv"}, Env: map[string]string{serveEnv: "9001"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Signal(context.Background(), syscall.SIGKILL)
	waitFor(t, "the server in the machine", func() bool {
		c, err := m.Dial(t.Context(), 9001)
		if err != nil {
			select {
			case <-srv.Done():
				b, _ := io.ReadAll(srv.Stderr())
				code, _ := srv.Wait()
				t.Fatalf("the server exited %d: %s", code, b)
			default:
			}
			return false
		}
		c.Close()
		return true
	})

	rt, up, err := spdy.RoundTripperFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(rc.Host + "/api/v1/namespaces/" + ns + "/pods/pf/portforward")
	stop, readyCh := make(chan struct{}), make(chan struct{})
	defer close(stop)
	var out, errOut bytes.Buffer
	pf, err := portforward.NewOnAddresses(spdy.NewDialer(up, &http.Client{Transport: rt}, http.MethodPost, u), []string{"127.0.0.1"}, []string{"0:9001"}, stop, readyCh, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = pf.ForwardPorts() }()
	select {
	case <-readyCh:
	case <-time.After(30 * time.Second):
		t.Fatal("port forward not ready")
	}
	ports, _ := pf.GetPorts()
	var body string
	waitFor(t, "the server through the port forward", func() bool {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/pid", ports[0].Local), nil)
		req.Header.Set("Authorization", "Bearer x")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200
	})
	if !strings.HasSuffix(body, " Bearer x") {
		t.Errorf("through the port forward: %q, want the Authorization kept", body)
	}
	req, _ := http.NewRequest(http.MethodGet, s.RouterURL()+"/pid", nil)
	req.Header.Set("X-Sandbox-ID", "pf")
	req.Header.Set("X-Sandbox-Port", "9001")
	req.Header.Set("Authorization", "Bearer x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.Contains(string(b), "Bearer") {
		t.Errorf("through the router: %s %q, want Authorization dropped", resp.Status, b)
	}
}

// TestViolations: what breaks the API is refused as the API server
// would, and recorded.
func TestViolations(t *testing.T) {
	s, err := New(t.Context(), Options{Farm: farm, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := restConfig(t, s)
	_, ext := clientsets(t, rc)
	_, err = ext.ExtensionsV1beta1().SandboxClaims(ns).Create(t.Context(), &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "no-pool"}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a claim with no pool: %v", err)
	}
	_, err = ext.ExtensionsV1beta1().SandboxClaims(ns).Create(t.Context(), newClaim("Bad_Name", nil), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a bad name: %v", err)
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"apiVersion":"extensions.agents.x-k8s.io/v1beta1","kind":"SandboxClaim","metadata":{"name":"x"},"spec":{"warmPoolRef":{"name":"p"},"warmpool":"p"}}`
	resp, err := hc.Post(rc.Host+"/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("an unknown field: %s", resp.Status)
	}
	resp, err = hc.Get(rc.Host + "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("an unknown resource: %s", resp.Status)
	}
	if v := s.Violations(); len(v) != 4 {
		t.Errorf("violations: %q, want 4", v)
	}
	bad := rest.CopyConfig(rc)
	bad.BearerToken = "wrong"
	_, ext2 := clientsets(t, bad)
	if _, err := ext2.ExtensionsV1beta1().SandboxTemplates(ns).Get(t.Context(), "tmpl", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("a wrong token: %v", err)
	}
}

// TestFaultsAndExpiry: injected statuses and lost answers, the claim
// quota, and expiry, the Sandbox deleted or leaked.
func TestFaultsAndExpiry(t *testing.T) {
	for _, leak := range []bool{false, true} {
		t.Run(fmt.Sprint("leak=", leak), func(t *testing.T) {
			s := newFake(t, Options{LeakOnExpiry: leak, MaxClaims: 1})
			agents, ext := clientsets(t, restConfig(t, s))
			claims := ext.ExtensionsV1beta1().SandboxClaims(ns)
			s.Inject(Fault{Op: "create sandboxclaims", Status: 503})
			if _, err := claims.Create(t.Context(), newClaim("e", nil), metav1.CreateOptions{}); !apierrors.IsServiceUnavailable(err) {
				t.Errorf("503: %v", err)
			}
			s.Inject(Fault{Op: "create sandboxclaims", Drop: true})
			c := newClaim("e", nil)
			c.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownTime: ptr.To(metav1.NewTime(time.Now().Add(3 * time.Second))), ShutdownPolicy: extv1beta1.ShutdownPolicyDelete}
			if _, err := claims.Create(t.Context(), c, metav1.CreateOptions{}); err == nil {
				t.Error("a lost answer answered")
			}
			if _, err := claims.Get(t.Context(), "e", metav1.GetOptions{}); err != nil {
				t.Fatalf("the claim whose answer was lost: %v", err)
			}
			if _, err := claims.Create(t.Context(), newClaim("e2", nil), metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") {
				t.Errorf("over the quota: %v", err)
			}
			waitFor(t, "the claim to expire", func() bool {
				_, err := claims.Get(t.Context(), "e", metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			})
			time.Sleep(300 * time.Millisecond)
			_, err := agents.AgentsV1beta1().Sandboxes(ns).Get(t.Context(), "e", metav1.GetOptions{})
			_, ok := s.Machine(ns, "e")
			if leak != (err == nil) || leak != ok {
				t.Errorf("after expiry: sandbox %v, machine %v; want both %v", err, ok, leak)
			}
			if leak {
				if err := agents.AgentsV1beta1().Sandboxes(ns).Delete(t.Context(), "e", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				waitFor(t, "the machine to go", func() bool { _, ok := s.Machine(ns, "e"); return !ok })
			}
		})
	}
}

// TestInvalidPodMetadata: pod labels outside the controller's allowed
// domains leave the claim Ready=False, InvalidMetadata, with no Sandbox.
func TestInvalidPodMetadata(t *testing.T) {
	s := newFake(t, Options{})
	agents, ext := clientsets(t, restConfig(t, s))
	c := newClaim("im", nil)
	c.Spec.AdditionalPodMetadata.Labels = map[string]string{"team": "a"}
	if _, err := ext.ExtensionsV1beta1().SandboxClaims(ns).Create(t.Context(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "InvalidMetadata", func() bool {
		got, err := ext.ExtensionsV1beta1().SandboxClaims(ns).Get(t.Context(), "im", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cond := apimeta.FindStatusCondition(got.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
		return cond != nil && cond.Reason == "InvalidMetadata"
	})
	if _, err := agents.AgentsV1beta1().Sandboxes(ns).Get(t.Context(), "im", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Sandbox of an invalid claim: %v", err)
	}
}
