package modal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/remote"
)

// API is Modal as a remote.API and remote.Checker.
type API struct {
	cfg Config
	c   *modal.Client
	log *slog.Logger
	// transport carries requests to the daemons through tunnels: TLS,
	// trusting Config.TunnelCA besides the system's authorities.
	transport http.RoundTripper

	mu     sync.Mutex
	app    *modal.App
	images map[string]*modal.Image   // by reference, built
	boxes  map[string]*modal.Sandbox // by sandbox id: the SDK's handle
	eps    map[string]remote.Endpoint
}

var (
	_ remote.API         = (*API)(nil)
	_ remote.Checker     = (*API)(nil)
	_ remote.Snapshotter = (*API)(nil)
)

// Tags berth keeps on a sandbox besides its labels: its name (which
// Modal's listing does not give) and when it was made, in Unix
// milliseconds.
const (
	tagName    = "berth.name"
	tagCreated = "berth.created"
	// tagSnapshot is the filesystem snapshot Snapshot took of the
	// sandbox, "KEY IMAGE-ID EXPIRY-UNIX-MS": a retry returns it.
	tagSnapshot = "berth.snapshot"
	ownTags     = 3
)

// Bounds of what berth sends and reads.
const (
	maxLabels    = 32
	maxList      = 1000     // sandboxes one List reads
	maxUpload    = 64 << 20 // a file Upload sends (the daemon is a few MiB)
	uploadChunk  = 1 << 20  // stdin written per request
	maxStderr    = 4 << 10  // of a failed upload or start, quoted
	tunnelWait   = 30 * time.Second
	callTimeout  = 2 * time.Minute // bounds one operation of the SDK
	throttleWait = 10 * time.Second
)

// envMu serializes the making of SDK clients that set the server URL:
// the SDK reads it only from $MODAL_SERVER_URL (or ~/.modal.toml) as a
// client is made.
var envMu sync.Mutex

// New returns the API over Modal.
func New(cfg Config) (*API, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TunnelCA != "" {
		pem, err := os.ReadFile(cfg.TunnelCA)
		if err != nil {
			return nil, fmt.Errorf("%w: modal: tunnel-ca-file: %v", errdefs.ErrBadInput, errors.Unwrap(err))
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: modal: tunnel-ca-file %s holds no PEM certificate", errdefs.ErrBadInput, cfg.TunnelCA)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	wait := throttleWait
	params := &modal.ClientParams{
		TokenID: cfg.TokenID, TokenSecret: cfg.TokenSecret, Environment: cfg.Environment,
		Logger: cfg.Logger, MaxThrottleWait: &wait,
	}
	c, err := newClient(params, cfg.ServerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: modal: %s", errdefs.ErrBadInput, scrub(err.Error(), cfg))
	}
	return &API{cfg: cfg, c: c, log: cfg.Logger, transport: tr,
		images: map[string]*modal.Image{}, boxes: map[string]*modal.Sandbox{}, eps: map[string]remote.Endpoint{}}, nil
}

// newClient makes the SDK's client, for serverURL when set.
func newClient(params *modal.ClientParams, serverURL string) (*modal.Client, error) {
	// Held for a client of no URL of its own too: it must not read the
	// variable another has set for its moment.
	envMu.Lock()
	defer envMu.Unlock()
	if serverURL == "" {
		return modal.NewClientWithOptions(params)
	}
	old, had := os.LookupEnv("MODAL_SERVER_URL")
	os.Setenv("MODAL_SERVER_URL", strings.TrimRight(serverURL, "/"))
	defer func() {
		if had {
			os.Setenv("MODAL_SERVER_URL", old)
		} else {
			os.Unsetenv("MODAL_SERVER_URL")
		}
	}()
	return modal.NewClientWithOptions(params)
}

// Close closes the SDK's connections.
func (a *API) Close() { a.c.Close() }

// Name implements remote.API.
func (a *API) Name() string { return Name }

// appOf is berth's app, asked of Modal (and made) once.
func (a *API) appOf(ctx context.Context) (*modal.App, error) {
	a.mu.Lock()
	app := a.app
	a.mu.Unlock()
	if app != nil {
		return app, nil
	}
	app, err := a.c.Apps.FromName(ctx, a.cfg.App, &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		return nil, a.classify("get app", err)
	}
	a.mu.Lock()
	a.app = app
	a.mu.Unlock()
	return app, nil
}

// imageOf is the image of ref, built once: the registry's image and a
// layer that adds the sandbox user where the image lacks it.
func (a *API) imageOf(ctx context.Context, app *modal.App, ref string) (*modal.Image, error) {
	a.mu.Lock()
	img := a.images[ref]
	a.mu.Unlock()
	if img != nil {
		return img, nil
	}
	img = a.c.Images.FromRegistry(ref, nil)
	if !strings.Contains(a.cfg.User, ":") {
		img = img.DockerfileCommands([]string{"RUN id -u " + a.cfg.User + " >/dev/null 2>&1 || useradd -m " + a.cfg.User}, nil)
	}
	img, err := img.Build(ctx, app, nil)
	if err != nil {
		return nil, a.classify("build image", err)
	}
	a.mu.Lock()
	a.images[ref] = img
	a.mu.Unlock()
	return img, nil
}

// Create implements remote.API. A name the app has already
// (AlreadyExists) is a retry after a lost answer: the sandbox the first
// call made is returned.
func (a *API) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if len(req.Labels) > maxLabels {
		return remote.Machine{}, fmt.Errorf("%w: modal: %d labels, at most %d", errdefs.ErrBadInput, len(req.Labels), maxLabels)
	}
	if req.Disk > 0 {
		return remote.Machine{}, fmt.Errorf("%w: modal: a sandbox's disk is Modal's, not sized per sandbox", errdefs.ErrUnsupported)
	}
	app, err := a.appOf(ctx)
	if err != nil {
		return remote.Machine{}, err
	}
	img, err := a.createImage(ctx, app, req)
	if err != nil {
		return remote.Machine{}, err
	}
	now := time.Now()
	timeout := min(ceilSeconds(req.Lifetime), MaxTimeout)
	if timeout <= 0 {
		timeout = MaxTimeout
	}
	tags := maps.Clone(req.Labels)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[tagName] = req.Name
	tags[tagCreated] = strconv.FormatInt(now.UnixMilli(), 10)
	params := &modal.SandboxCreateParams{
		CPU:            req.CPU,
		MemoryMiB:      int((max(req.Memory, 0) + 1<<20 - 1) >> 20),
		Timeout:        timeout,
		IdleTimeout:    a.cfg.IdleTimeout,
		Name:           req.Name,
		Tags:           tags,
		EncryptedPorts: []int{a.cfg.Port},
	}
	if err := egress(params, req.Network); err != nil {
		return remote.Machine{}, err
	}
	// The V2 backend's calls are named so, whatever the profile says:
	// List and FromName then see every sandbox berth makes.
	sb, err := a.c.Sandboxes.ExperimentalCreate(ctx, app, img, params)
	if err != nil {
		err = a.classify("create sandbox", err)
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			return remote.Machine{}, err
		}
		return a.Find(ctx, req.Name)
	}
	a.remember(sb)
	return remote.Machine{
		ID: sb.SandboxID, Name: req.Name, Labels: maps.Clone(req.Labels),
		State: remote.MachineRunning, CreatedAt: now, ExpiresAt: now.Add(timeout),
	}, nil
}

// Find implements remote.API: the running sandbox of the name, and its
// tags.
func (a *API) Find(ctx context.Context, name string) (remote.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sb, err := a.c.Sandboxes.ExperimentalFromName(ctx, a.cfg.App, name, &modal.SandboxExperimentalFromNameParams{Environment: a.cfg.Environment})
	if err != nil {
		return remote.Machine{}, a.classify("get sandbox", err)
	}
	m, err := a.machine(ctx, a.remember(sb))
	if err != nil {
		return remote.Machine{}, err
	}
	if m.Name != name {
		return remote.Machine{}, fmt.Errorf("%w: modal: no sandbox of berth's named %q", errdefs.ErrNotFound, name)
	}
	return m, nil
}

// machine describes sb from its tags.
func (a *API) machine(ctx context.Context, sb *modal.Sandbox) (remote.Machine, error) {
	tags, err := sb.GetTags(ctx, nil)
	if err != nil {
		return remote.Machine{}, a.classify("get tags", err)
	}
	if len(tags) > maxLabels+ownTags {
		return remote.Machine{}, fmt.Errorf("%w: modal: sandbox %s has %d tags", errdefs.ErrProviderUnavailable, sb.SandboxID, len(tags))
	}
	m := remote.Machine{ID: sb.SandboxID, Name: tags[tagName], Labels: maps.Clone(tags), State: remote.MachineRunning}
	delete(m.Labels, tagName)
	delete(m.Labels, tagCreated)
	delete(m.Labels, tagSnapshot)
	if ms, err := strconv.ParseInt(tags[tagCreated], 10, 64); err == nil && ms > 0 {
		m.CreatedAt = time.UnixMilli(ms)
		m.ExpiresAt = m.CreatedAt.Add(a.timeoutOf(m))
	}
	return m, nil
}

// timeoutOf is the timeout Create gave m's sandbox, from the lifetime
// package remote keeps in its labels.
func (a *API) timeoutOf(m remote.Machine) time.Duration {
	if n, err := strconv.ParseInt(m.Labels["berth.lifetime"], 10, 64); err == nil && n > 0 {
		return min(time.Duration(n)*time.Second, MaxTimeout)
	}
	return MaxTimeout
}

// List implements remote.API: the app's running sandboxes that carry
// labels as tags, described by their tags (a request each), at most
// maxList.
func (a *API) List(ctx context.Context, labels map[string]string) ([]remote.Machine, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	app, err := a.appOf(ctx)
	if err != nil {
		return nil, err
	}
	seq, err := a.c.Sandboxes.ExperimentalList(ctx, &modal.SandboxExperimentalListParams{AppID: app.AppID, Tags: maps.Clone(labels)})
	if err != nil {
		return nil, a.classify("list sandboxes", err)
	}
	var out []remote.Machine
	n := 0
	for sb, err := range seq {
		if err != nil {
			return nil, a.classify("list sandboxes", err)
		}
		if n++; n > maxList {
			return nil, fmt.Errorf("%w: modal: more than %d sandboxes carry %v", errdefs.ErrProviderUnavailable, maxList, labels)
		}
		m, err := a.machine(ctx, a.remember(sb))
		if errors.Is(err, errdefs.ErrNotFound) {
			continue // ended since
		}
		if err != nil {
			return nil, err
		}
		if m.Name == "" || !carries(m.Labels, labels) {
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

func carries(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Delete implements remote.API: the sandbox is terminated.
func (a *API) Delete(ctx context.Context, m remote.Machine) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sb, err := a.box(ctx, m)
	if err != nil {
		return err
	}
	_, err = sb.Terminate(ctx, nil)
	a.forget(m.ID)
	if err := a.classify("terminate sandbox", err); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// uploadScript writes its stdin to $1 through a file beside it, made
// executable, so that a file half written is never run.
const uploadScript = `set -e; mkdir -p "$(dirname "$1")"; cat > "$1.part"; chmod 0755 "$1.part"; mv -f "$1.part" "$1"`

// Upload implements remote.API: a command in the sandbox writes its
// standard input to the file, sent in chunks of uploadChunk.
func (a *API) Upload(ctx context.Context, m remote.Machine, p string, r io.Reader) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: modal: upload path %q is not absolute", errdefs.ErrBadInput, p)
	}
	sb, err := a.box(ctx, m)
	if err != nil {
		return err
	}
	cp, err := sb.Exec(ctx, []string{"sh", "-c", uploadScript, "sh", p}, &modal.SandboxExecParams{Stdout: modal.Ignore})
	if err != nil {
		return a.classify("upload", err)
	}
	// The SDK writes an exec's input with no context of the caller's:
	// the writes go on in the background, and the upload gives up on
	// them when ctx ends.
	done := make(chan error, 1)
	go func() { done <- a.send(cp, p, r) }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-ctx.Done():
		return a.classify("upload", ctx.Err())
	}
	return a.waitOK(ctx, "upload", cp)
}

// send writes r to cp's input, in chunks of uploadChunk, then ends it.
func (a *API) send(cp *modal.ContainerProcess, p string, r io.Reader) error {
	buf := make([]byte, uploadChunk)
	var sent int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if sent += int64(n); sent > maxUpload {
				return fmt.Errorf("%w: modal: upload %s: more than %d MiB", errdefs.ErrBadInput, p, maxUpload>>20)
			}
			if _, err := cp.Stdin.Write(buf[:n]); err != nil {
				return a.classify("upload", err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("modal: upload %s: %w", p, rerr)
		}
	}
	if err := cp.Stdin.Close(); err != nil {
		return a.classify("upload", err)
	}
	return nil
}

// waitOK waits for cp, an error quoting its stderr unless it exits 0.
func (a *API) waitOK(ctx context.Context, op string, cp *modal.ContainerProcess) error {
	code, err := cp.Wait(ctx, nil)
	if err != nil {
		return a.classify(op, err)
	}
	if code != 0 {
		b, _ := io.ReadAll(io.LimitReader(cp.Stderr, maxStderr))
		return &Error{Service: Name, Op: op, Kind: errdefs.ErrProviderUnavailable,
			Message: oneLine(scrub(fmt.Sprintf("exit code %d: %s", code, b), a.cfg))}
	}
	return nil
}

// startScript starts "$@" detached: in the background, deaf to the
// hangup of the exec's end, with no input or output of the exec's, so
// that it runs on after the exec ends.
const startScript = `nohup "$@" </dev/null >/dev/null 2>&1 &`

// Start implements remote.API: one exec starts the command in the
// background, env given in the exec's environment (not its argv).
func (a *API) Start(ctx context.Context, m remote.Machine, argv []string, env map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	for k := range env {
		if !validEnvName(k) {
			return fmt.Errorf("%w: modal: environment variable name %q", errdefs.ErrBadInput, k)
		}
	}
	sb, err := a.box(ctx, m)
	if err != nil {
		return err
	}
	cp, err := sb.Exec(ctx, append([]string{"sh", "-c", startScript, "sh"}, argv...), &modal.SandboxExecParams{Env: env, Stdout: modal.Ignore})
	if err != nil {
		return a.classify("start command", err)
	}
	return a.waitOK(ctx, "start command", cp)
}

// Endpoint implements remote.API: the encrypted tunnel of the daemon's
// port, asked once per sandbox.
func (a *API) Endpoint(ctx context.Context, m remote.Machine, port int) (remote.Endpoint, error) {
	if port != a.cfg.Port {
		return remote.Endpoint{}, fmt.Errorf("%w: modal: a sandbox's tunnel is for port %d only, made with it", errdefs.ErrUnsupported, a.cfg.Port)
	}
	a.mu.Lock()
	ep, ok := a.eps[m.ID]
	a.mu.Unlock()
	if ok {
		return ep, nil
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	sb, err := a.box(ctx, m)
	if err != nil {
		return remote.Endpoint{}, err
	}
	tunnels, err := sb.Tunnels(ctx, tunnelWait, nil)
	if err != nil {
		return remote.Endpoint{}, a.classify("get tunnels", err)
	}
	t := tunnels[port]
	if t == nil || t.Host == "" {
		return remote.Endpoint{}, fmt.Errorf("%w: modal: sandbox %s has no tunnel for port %d", errdefs.ErrProviderUnavailable, m.ID, port)
	}
	ep = remote.Endpoint{URL: t.URL(), Transport: a.transport}
	a.mu.Lock()
	a.eps[m.ID] = ep
	a.mu.Unlock()
	return ep, nil
}

// KeepAlive implements remote.API. A Modal sandbox's timeout is fixed
// when it is made, to the sandbox's lifetime (at most MaxTimeout), and
// its idle timeout is off unless configured; so there is nothing to
// renew, and no keeping a sandbox past its timeout.
func (a *API) KeepAlive(ctx context.Context, m remote.Machine, d time.Duration) error {
	return nil
}

// Check implements remote.Checker: one look-up of berth's app, which
// proves that Modal answers and takes the token (an app not made yet is
// no failure).
func (a *API) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := a.c.Apps.FromName(ctx, a.cfg.App, nil)
	if err := a.classify("get app", err); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// box is the SDK's handle of m's sandbox; one is made once per id.
func (a *API) box(_ context.Context, m remote.Machine) (*modal.Sandbox, error) {
	if m.ID == "" {
		return nil, fmt.Errorf("%w: modal: a machine with no id", errdefs.ErrBadInput)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if sb, ok := a.boxes[m.ID]; ok {
		return sb, nil
	}
	sb, err := a.c.Sandboxes.FromID(context.Background(), m.ID, nil)
	if err != nil {
		return nil, a.classify("get sandbox", err)
	}
	a.boxes[m.ID] = sb
	return sb, nil
}

// remember keeps sb's handle, or returns the one kept: a handle holds
// its connection to the sandbox's command router.
func (a *API) remember(sb *modal.Sandbox) *modal.Sandbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.boxes[sb.SandboxID]; ok {
		return old
	}
	a.boxes[sb.SandboxID] = sb
	return sb
}

func (a *API) forget(id string) {
	a.mu.Lock()
	sb := a.boxes[id]
	delete(a.boxes, id)
	delete(a.eps, id)
	a.mu.Unlock()
	if sb != nil {
		_ = sb.Detach()
	}
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) time.Duration {
	return (max(d, 0) + time.Second - 1) / time.Second * time.Second
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
