package gke

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	agentsclient "sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	agentsclientset "sigs.k8s.io/agent-sandbox/clients/k8s/clientset/versioned"
	extclientset "sigs.k8s.io/agent-sandbox/clients/k8s/extensions/clientset/versioned"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote"
)

// API is a cluster running the agent-sandbox controller, as a
// remote.API and remote.Checker.
type API struct {
	cfg     Config
	rest    *rest.Config
	agents  agentsclientset.Interface
	ext     extclientset.Interface
	runtime *agentsclient.Client
	pf      *portForward
	log     *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]string                // by claim name: its Sandbox's name
	endpoints map[string]remote.Endpoint       // by claim name and port
	handles   map[string]*agentsclient.Sandbox // by claim name: the runtime's
}

var (
	_ remote.API     = (*API)(nil)
	_ remote.Checker = (*API)(nil)
)

// Annotations and labels berth keeps on a claim, propagated to its
// Sandbox's pod template.
const (
	// annotationLabels holds berth's labels, all of them, as JSON: a
	// Kubernetes label value cannot hold every value berth's can.
	annotationLabels = "berth.dev/labels"
	// annotationName is the machine's name, as berth gave it.
	annotationName = "berth.dev/name"
	// createdBy is the value of the controller's created-by label,
	// which it copies onto the Sandbox's own labels: the handle by which
	// List finds Sandboxes whose claim has gone.
	createdBy = "berth"
)

// Bounds of a call and of a listing.
const (
	requestTimeout = time.Minute
	readyTimeout   = 5 * time.Minute
	listPage       = 100
	maxPages       = 50
	maxLabels      = 32
	// maxUpload bounds a file Upload sends (the daemon is a few MiB).
	maxUpload = 64 << 20
)

// New returns the API over the cluster cfg names.
func New(cfg Config) (*API, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rc, err := cfg.restConfig()
	if err != nil {
		return nil, err
	}
	rc.UserAgent = "berth"
	rc.Timeout = requestTimeout
	agents, err := agentsclientset.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: gke provider: %s", errdefs.ErrBadInput, firstLine(err.Error()))
	}
	ext, err := extclientset.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: gke provider: %s", errdefs.ErrBadInput, firstLine(err.Error()))
	}
	runtime, err := agentsclient.NewClient(context.Background(), agentsclient.Options{
		Namespace: cfg.Namespace, APIURL: cfg.RouterURL, RestConfig: rc,
		Logger: logr.Discard(), Quiet: true, RequestTimeout: requestTimeout, MaxUploadSize: maxUpload,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: gke provider: %s", errdefs.ErrBadInput, firstLine(err.Error()))
	}
	a := &API{
		cfg: cfg, rest: rc, agents: agents, ext: ext, runtime: runtime, log: cfg.Logger,
		sandboxes: map[string]string{}, endpoints: map[string]remote.Endpoint{}, handles: map[string]*agentsclient.Sandbox{},
	}
	if cfg.Endpoint == EndpointPortForward {
		if a.pf, err = newPortForward(rc); err != nil {
			return nil, fmt.Errorf("%w: gke provider: port forward: %s", errdefs.ErrBadInput, firstLine(err.Error()))
		}
	}
	return a, nil
}

// Name implements remote.API.
func (a *API) Name() string { return Name }

func (a *API) classify(op string, err error) error { return classify(op, err, a.rest.BearerToken) }

// claimName is the claim's name for machine name: the name itself when
// Kubernetes takes it as one, else one derived from it.
func claimName(name string) string {
	if len(validation.IsDNS1123Label(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "berth-" + hex.EncodeToString(sum[:12])
}

// kubeLabels are those of berth's labels Kubernetes takes as labels, and
// created-by.
func kubeLabels(l map[string]string) map[string]string {
	out := map[string]string{sandboxv1beta1.CreatedByLabel: createdBy}
	for k, v := range l {
		if len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0 {
			out[k] = v
		}
	}
	return out
}

// Create implements remote.API: a claim named for req.Name, from the
// warm pool (req.Image, else the configured one), with berth's labels
// and a shutdown time at the end of req.Lifetime. A claim that exists is
// a retry's after a lost answer: it is the one waited for.
func (a *API) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	if req.CPU > 0 || req.Memory > 0 || req.Disk > 0 {
		return remote.Machine{}, fmt.Errorf("%w: gke: a sandbox has its template's resources; make a template of the size wanted", errdefs.ErrUnsupported)
	}
	if len(req.Labels) > maxLabels {
		return remote.Machine{}, fmt.Errorf("%w: gke: %d labels, at most %d", errdefs.ErrBadInput, len(req.Labels), maxLabels)
	}
	pool := a.cfg.WarmPool
	if req.Image != "" {
		if len(validation.IsDNS1123Subdomain(req.Image)) > 0 {
			return remote.Machine{}, fmt.Errorf("%w: gke: image %q is not a warm pool's name", errdefs.ErrBadInput, req.Image)
		}
		pool = req.Image
	}
	all, err := json.Marshal(req.Labels)
	if err != nil {
		return remote.Machine{}, fmt.Errorf("%w: gke: labels: %v", errdefs.ErrBadInput, err)
	}
	kl := kubeLabels(req.Labels)
	ann := map[string]string{annotationLabels: string(all), annotationName: req.Name}
	claim := &extv1beta1.SandboxClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claimName(req.Name), Namespace: a.cfg.Namespace, Labels: kl, Annotations: ann},
		Spec: extv1beta1.SandboxClaimSpec{
			WarmPoolRef: extv1beta1.SandboxWarmPoolRef{Name: pool},
			// The pod, and so the Sandbox's pod template, carries the
			// annotations too: a Sandbox whose claim has gone still says
			// whose it is. Not the labels: the controller takes pod
			// labels of its allowed domains only.
			AdditionalPodMetadata: sandboxv1beta1.PodMetadata{Annotations: maps.Clone(ann)},
		},
	}
	if req.Lifetime > 0 {
		claim.Spec.Lifecycle = &extv1beta1.Lifecycle{
			ShutdownTime:   ptr.To(metav1.NewTime(time.Now().Add(req.Lifetime).Truncate(time.Second).Add(time.Second))),
			ShutdownPolicy: extv1beta1.ShutdownPolicyDelete,
		}
	}
	_, err = a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return remote.Machine{}, a.classify("create claim", err)
	}
	return a.waitReady(ctx, claim.Name)
}

// waitReady polls the claim, with backoff, until its Sandbox is Ready,
// as long as ctx and readyTimeout let it.
func (a *API) waitReady(ctx context.Context, name string) (remote.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	wait := 50 * time.Millisecond
	for {
		c, err := a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return remote.Machine{}, a.classify("get claim", err)
		}
		cond := apimeta.FindStatusCondition(c.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
		switch {
		case cond != nil && cond.Status == metav1.ConditionTrue && c.Status.SandboxStatus.Name != "":
			sb, err := a.agents.AgentsV1beta1().Sandboxes(a.cfg.Namespace).Get(ctx, c.Status.SandboxStatus.Name, metav1.GetOptions{})
			if err != nil {
				return remote.Machine{}, a.classify("get sandbox", err)
			}
			if pa := sb.Spec.PodTemplate.ObjectMeta.Annotations; pa[annotationName] != c.Annotations[annotationName] || pa[annotationLabels] != c.Annotations[annotationLabels] {
				return remote.Machine{}, fmt.Errorf("%w: gke: sandbox %s does not carry its claim's labels", errdefs.ErrProviderUnavailable, sb.Name)
			}
			return a.machine(c, sb), nil
		case cond != nil && (cond.Reason == "WarmPoolNotFound" || cond.Reason == "TemplateNotFound" || cond.Reason == "InvalidMetadata"):
			return remote.Machine{}, fmt.Errorf("%w: gke: claim %s: %s: %s", errdefs.ErrBadInput, name, cond.Reason, firstLine(cond.Message))
		}
		select {
		case <-ctx.Done():
			return remote.Machine{}, fmt.Errorf("%w: gke: claim %s not ready: %v", errdefs.ErrProviderUnavailable, name, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Second)
	}
}

// labelsOf are berth's labels, as the annotation holds them.
func labelsOf(ann map[string]string) map[string]string {
	var l map[string]string
	if err := json.Unmarshal([]byte(ann[annotationLabels]), &l); err != nil || l == nil {
		return map[string]string{}
	}
	return l
}

func carries(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// machine is claim c, and its Sandbox sb, as package remote sees them;
// its ID is the Sandbox's UID.
func (a *API) machine(c *extv1beta1.SandboxClaim, sb *sandboxv1beta1.Sandbox) remote.Machine {
	m := remote.Machine{Name: c.Annotations[annotationName], Labels: labelsOf(c.Annotations), CreatedAt: c.CreationTimestamp.Time, State: remote.MachineRunning}
	if m.Name == "" {
		m.Name = c.Name
	}
	if lc := c.Spec.Lifecycle; lc != nil && lc.ShutdownTime != nil {
		m.ExpiresAt = lc.ShutdownTime.Time
	}
	if sb != nil {
		m.ID = string(sb.UID)
		a.mu.Lock()
		a.sandboxes[c.Name] = sb.Name
		a.mu.Unlock()
		m.State = stateOf(sb)
	}
	return m
}

// orphan is a Sandbox whose claim has gone, as package remote sees it.
func (a *API) orphan(sb *sandboxv1beta1.Sandbox) remote.Machine {
	ann := sb.Spec.PodTemplate.ObjectMeta.Annotations
	m := remote.Machine{
		ID: string(sb.UID), Name: ann[annotationName], Labels: labelsOf(ann),
		CreatedAt: sb.CreationTimestamp.Time, State: stateOf(sb),
	}
	if m.Name == "" {
		m.Name = sb.Name
	}
	a.mu.Lock()
	a.sandboxes[claimName(m.Name)] = sb.Name
	a.mu.Unlock()
	return m
}

func stateOf(sb *sandboxv1beta1.Sandbox) remote.MachineState {
	if c := apimeta.FindStatusCondition(sb.Status.Conditions, string(sandboxv1beta1.SandboxConditionFinished)); c != nil && c.Status == metav1.ConditionTrue {
		return remote.MachineFailed
	}
	if c := apimeta.FindStatusCondition(sb.Status.Conditions, string(sandboxv1beta1.SandboxConditionSuspended)); c != nil && c.Status == metav1.ConditionTrue {
		return remote.MachineStopped
	}
	if sb.DeletionTimestamp != nil {
		return remote.MachineFailed
	}
	return remote.MachineRunning
}

// Find implements remote.API: the claim, or a Sandbox of berth's whose
// claim has gone.
func (a *API) Find(ctx context.Context, name string) (remote.Machine, error) {
	cn := claimName(name)
	c, err := a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace).Get(ctx, cn, metav1.GetOptions{})
	if err == nil {
		if c.DeletionTimestamp != nil {
			return remote.Machine{}, fmt.Errorf("%w: gke: claim %s is being deleted", errdefs.ErrNotFound, cn)
		}
		sbName := c.Status.SandboxStatus.Name
		if sbName == "" {
			// Not made yet: a Create cut short; wait for it.
			return a.waitReady(ctx, cn)
		}
		sb, err := a.agents.AgentsV1beta1().Sandboxes(a.cfg.Namespace).Get(ctx, sbName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			m := a.machine(c, nil)
			m.State = remote.MachineFailed
			return m, nil
		}
		if err != nil {
			return remote.Machine{}, a.classify("get sandbox", err)
		}
		return a.machine(c, sb), nil
	}
	if !apierrors.IsNotFound(err) {
		return remote.Machine{}, a.classify("get claim", err)
	}
	sb, err := a.agents.AgentsV1beta1().Sandboxes(a.cfg.Namespace).Get(ctx, cn, metav1.GetOptions{})
	if err != nil {
		return remote.Machine{}, a.classify("get sandbox", err)
	}
	if sb.Spec.PodTemplate.ObjectMeta.Annotations[annotationName] != name {
		return remote.Machine{}, fmt.Errorf("%w: gke: no claim %s", errdefs.ErrNotFound, cn)
	}
	return a.orphan(sb), nil
}

// List implements remote.API: the claims that carry labels, and the
// Sandboxes of berth's whose claim has gone (an expired claim's that the
// controller left), so that the reaper ends them too.
func (a *API) List(ctx context.Context, want map[string]string) ([]remote.Machine, error) {
	sel := labels.SelectorFromSet(kubeLabels(want)).String()
	var out []remote.Machine
	claims := map[string]bool{}
	err := a.pages(ctx, "list claims", func(opts metav1.ListOptions) (string, error) {
		opts.LabelSelector = sel
		l, err := a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			c := &l.Items[i]
			claims[string(c.UID)] = true
			if c.DeletionTimestamp != nil || !carries(labelsOf(c.Annotations), want) {
				continue
			}
			if c.Status.SandboxStatus.Name != "" {
				a.mu.Lock()
				a.sandboxes[c.Name] = c.Status.SandboxStatus.Name
				a.mu.Unlock()
			}
			out = append(out, a.machine(c, nil))
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	// The Sandboxes: their ids, for the claims', and the orphans.
	byClaim := map[string]*sandboxv1beta1.Sandbox{}
	err = a.pages(ctx, "list sandboxes", func(opts metav1.ListOptions) (string, error) {
		opts.LabelSelector = labels.SelectorFromSet(labels.Set{sandboxv1beta1.CreatedByLabel: createdBy}).String()
		l, err := a.agents.AgentsV1beta1().Sandboxes(a.cfg.Namespace).List(ctx, opts)
		if err != nil {
			return "", err
		}
		for i := range l.Items {
			sb := &l.Items[i]
			ref := metav1.GetControllerOf(sb)
			if ref != nil && claims[string(ref.UID)] {
				byClaim[string(ref.UID)] = sb
				continue
			}
			if ref != nil && ref.Kind == "SandboxClaim" {
				// A claim of another selection, or one made since.
				if _, err := a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace).Get(ctx, ref.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					continue
				}
			}
			if !carries(labelsOf(sb.Spec.PodTemplate.ObjectMeta.Annotations), want) || sb.DeletionTimestamp != nil {
				continue
			}
			out = append(out, a.orphan(sb))
		}
		return l.Continue, nil
	})
	if err != nil {
		return nil, err
	}
	for i := range out {
		if out[i].ID != "" {
			continue
		}
		// A claim's machine: its Sandbox's UID, or none yet.
		a.mu.Lock()
		sbName := a.sandboxes[claimName(out[i].Name)]
		a.mu.Unlock()
		for _, sb := range byClaim {
			if sb.Name == sbName {
				out[i].ID, out[i].State = string(sb.UID), stateOf(sb)
			}
		}
		if out[i].ID == "" {
			out[i].State = remote.MachineFailed
		}
	}
	return out, nil
}

// pages calls list with pages of listPage, at most maxPages of them.
func (a *API) pages(ctx context.Context, op string, list func(metav1.ListOptions) (string, error)) error {
	cont := ""
	for range maxPages {
		next, err := list(metav1.ListOptions{Limit: listPage, Continue: cont})
		if err != nil {
			return a.classify(op, err)
		}
		if next == "" {
			return nil
		}
		cont = next
	}
	return fmt.Errorf("%w: gke: %s: more than %d", errdefs.ErrProviderUnavailable, op, listPage*maxPages)
}

// Delete implements remote.API: the claim, whose Sandbox and pod the
// garbage collector deletes; or, with the claim gone, the Sandbox left.
func (a *API) Delete(ctx context.Context, m remote.Machine) error {
	cn := claimName(m.Name)
	a.forget(cn)
	bg := metav1.DeletePropagationBackground
	err := a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace).Delete(ctx, cn, metav1.DeleteOptions{PropagationPolicy: &bg})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return a.classify("delete claim", err)
	}
	a.mu.Lock()
	sbName := a.sandboxes[cn]
	a.mu.Unlock()
	if sbName == "" {
		sbName = cn
	}
	var pre *metav1.Preconditions
	if m.ID != "" {
		pre = metav1.NewUIDPreconditions(m.ID)
	}
	err = a.agents.AgentsV1beta1().Sandboxes(a.cfg.Namespace).Delete(ctx, sbName, metav1.DeleteOptions{PropagationPolicy: &bg, Preconditions: pre})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return a.classify("delete sandbox", err)
	}
	return nil
}

func (a *API) forget(cn string) {
	a.mu.Lock()
	h := a.handles[cn]
	delete(a.handles, cn)
	for k := range a.endpoints {
		if strings.HasPrefix(k, cn+"/") {
			delete(a.endpoints, k)
		}
	}
	a.mu.Unlock()
	if h != nil {
		_ = h.Disconnect(context.Background())
	}
}

// handle is the runtime client's handle of m's sandbox, attached once.
func (a *API) handle(ctx context.Context, m remote.Machine) (*agentsclient.Sandbox, error) {
	cn := claimName(m.Name)
	a.mu.Lock()
	h, ok := a.handles[cn]
	a.mu.Unlock()
	if ok && h.IsReady() {
		return h, nil
	}
	h, err := a.runtime.GetSandbox(ctx, cn, a.cfg.Namespace)
	if err != nil {
		return nil, a.classify("attach sandbox", err)
	}
	a.mu.Lock()
	a.handles[cn] = h
	a.mu.Unlock()
	return h, nil
}

// Upload implements remote.API: the runtime writes the file in its
// directory, and one execute moves it to p with mode 0755. With the
// daemon baked into the template's image, the daemon is not sent.
func (a *API) Upload(ctx context.Context, m remote.Machine, p string, r io.Reader) error {
	if a.cfg.DaemonBaked != "" && p == a.cfg.DaemonBaked {
		return nil
	}
	data, err := io.ReadAll(io.LimitReader(r, maxUpload+1))
	if err != nil {
		return fmt.Errorf("gke: upload %s: %w", p, err)
	}
	if len(data) > maxUpload {
		return fmt.Errorf("%w: gke: upload %s: more than %d MiB", errdefs.ErrBadInput, p, maxUpload>>20)
	}
	h, err := a.handle(ctx, m)
	if err != nil {
		return err
	}
	tmp := ".berth-upload-" + rand.Text()[:12]
	if err := h.Write(ctx, tmp, data); err != nil {
		return a.classify("upload "+path.Base(p), err)
	}
	return a.run(ctx, h, "install "+path.Base(p), []string{"sh", "-c",
		`mkdir -p "$1" && mv -f "$2" "$3" && chmod 0755 "$3"`, "sh", path.Dir(p), tmp, p})
}

// run executes argv through the runtime, which splits its command as
// shlex does, and fails unless it exits 0.
func (a *API) run(ctx context.Context, h *agentsclient.Sandbox, op string, argv []string) error {
	res, err := h.Run(ctx, shellJoin(argv))
	if err != nil {
		return a.classify(op, err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%w: gke: %s: exit %d: %s", errdefs.ErrProviderUnavailable, op, res.ExitCode, firstLine(strings.TrimSpace(res.Stderr)))
	}
	return nil
}

// Start implements remote.API: env goes in a file the runtime writes
// (never an argv), which a shell reads and removes before it starts argv
// detached (nohup, its own input and output) and exits.
func (a *API) Start(ctx context.Context, m remote.Machine, argv []string, env map[string]string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%w: gke: no command", errdefs.ErrBadInput)
	}
	h, err := a.handle(ctx, m)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !validEnvName(k) {
			return fmt.Errorf("%w: gke: environment variable name %q", errdefs.ErrBadInput, k)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(env[k]))
	}
	envFile := ".berth-env-" + rand.Text()[:12]
	if err := h.Write(ctx, envFile, []byte(b.String())); err != nil {
		return a.classify("start command", err)
	}
	script := `. "./$1" && rm -f "./$1" && shift && ` +
		`{ test -x "$1" || { echo "no executable $1 in the sandbox" >&2; exit 127; }; } && ` +
		`{ nohup "$@" </dev/null >/dev/null 2>&1 & }`
	return a.run(ctx, h, "start command", append([]string{"sh", "-c", script, "sh", envFile}, argv...))
}

// Endpoint implements remote.API: the API server's port forward to the
// sandbox's pod, or, from inside the cluster, its Service. The
// sandbox router is no way to the daemon: it drops Authorization, the
// daemon's bearer token, from what it forwards.
func (a *API) Endpoint(ctx context.Context, m remote.Machine, port int) (remote.Endpoint, error) {
	cn := claimName(m.Name)
	key := cn + "/" + strconv.Itoa(port)
	a.mu.Lock()
	ep, ok := a.endpoints[key]
	a.mu.Unlock()
	if ok {
		return ep, nil
	}
	a.mu.Lock()
	sbName := a.sandboxes[cn]
	a.mu.Unlock()
	if sbName == "" {
		got, err := a.Find(ctx, m.Name)
		if err != nil {
			return remote.Endpoint{}, err
		}
		if got.ID != m.ID {
			return remote.Endpoint{}, fmt.Errorf("%w: gke: sandbox of %s is gone", errdefs.ErrNotFound, m.Name)
		}
		a.mu.Lock()
		sbName = a.sandboxes[cn]
		a.mu.Unlock()
	}
	sb, err := a.agents.AgentsV1beta1().Sandboxes(a.cfg.Namespace).Get(ctx, sbName, metav1.GetOptions{})
	if err != nil {
		return remote.Endpoint{}, a.classify("get sandbox", err)
	}
	switch a.cfg.Endpoint {
	case EndpointService:
		if sb.Status.ServiceFQDN == "" {
			return remote.Endpoint{}, fmt.Errorf("%w: gke: sandbox %s has no service", errdefs.ErrProviderUnavailable, sb.Name)
		}
		ep = remote.Endpoint{URL: "http://" + net.JoinHostPort(sb.Status.ServiceFQDN, strconv.Itoa(port))}
	default:
		pod := sb.Annotations[sandboxv1beta1.SandboxPodNameAnnotation]
		if pod == "" {
			pod = sb.Name
		}
		ep = remote.Endpoint{
			URL:       "http://" + net.JoinHostPort(pod, strconv.Itoa(port)),
			Transport: a.pf.transport(a.cfg.Namespace, pod, port),
		}
	}
	a.mu.Lock()
	a.endpoints[key] = ep
	a.mu.Unlock()
	return ep, nil
}

// KeepAlive implements remote.API: the claim's shutdown time moves to
// at least d from now. A claim with none has no time limit.
func (a *API) KeepAlive(ctx context.Context, m remote.Machine, d time.Duration) error {
	cn := claimName(m.Name)
	claims := a.ext.ExtensionsV1beta1().SandboxClaims(a.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		c, err := claims.Get(ctx, cn, metav1.GetOptions{})
		if err != nil {
			return a.classify("get claim", err)
		}
		lc := c.Spec.Lifecycle
		want := time.Now().Add(d).Truncate(time.Second).Add(time.Second)
		if lc == nil || lc.ShutdownTime == nil || !lc.ShutdownTime.Time.Before(want) {
			return nil
		}
		lc.ShutdownTime = ptr.To(metav1.NewTime(want))
		_, err = claims.Update(ctx, c, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 3 {
			return a.classify("update claim", err)
		}
	}
}

// Check implements remote.Checker: the template, which proves the
// cluster answers, takes the credential, and has what berth needs.
func (a *API) Check(ctx context.Context) error {
	_, err := a.ext.ExtensionsV1beta1().SandboxTemplates(a.cfg.Namespace).Get(ctx, a.cfg.Template, metav1.GetOptions{})
	return a.classify("get template", err)
}

func validEnvName(k string) bool {
	if k == "" || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for _, r := range k {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// shellQuote quotes s for a POSIX shell, and for shlex, which splits the
// runtime's commands alike.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, s := range argv {
		q[i] = shellQuote(s)
	}
	return strings.Join(q, " ")
}
