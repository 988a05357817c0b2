package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	sdk "github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/options"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
	"github.com/berth-dev/berth/provider/remote"
)

// API is Daytona as a remote.API and remote.Checker.
type API struct {
	cfg Config
	sdk *sdk.Client
	// api is the client the SDK is built on, for what the SDK's types
	// drop (labels, times) or do not offer (last activity).
	api *apiclient.APIClient
	log *slog.Logger

	mu       sync.Mutex
	boxes    map[string]*sdk.Sandbox    // by sandbox id: the SDK's handle
	previews map[string]remote.Endpoint // by sandbox id and port
}

var (
	_ remote.API     = (*API)(nil)
	_ remote.Checker = (*API)(nil)
)

// requestTimeout bounds one call to Daytona's API or toolbox.
const requestTimeout = time.Minute

// New returns the API over Daytona.
func New(cfg Config) (*API, error) {
	if cfg.APIKey == "" {
		return nil, fmt.Errorf("%w: daytona: no API key", errdefs.ErrProviderAuth)
	}
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	u, err := url.Parse(cfg.APIURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: daytona: api-url %q is not an http(s) URL", errdefs.ErrBadInput, cfg.APIURL)
	}
	cfg.AutoStop = max(cfg.AutoStop, 0)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := sdk.NewClientWithConfig(&types.DaytonaConfig{APIKey: cfg.APIKey, APIUrl: cfg.APIURL, Target: cfg.Target})
	if err != nil {
		return nil, fmt.Errorf("%w: daytona: %s", errdefs.ErrBadInput, svcerr.Scrub(err.Error(), cfg.APIKey))
	}
	ac := apiclient.NewConfiguration()
	ac.Servers = apiclient.ServerConfigurations{{URL: strings.TrimRight(cfg.APIURL, "/")}}
	ac.HTTPClient = &http.Client{Timeout: requestTimeout}
	ac.UserAgent = "berth"
	return &API{
		cfg: cfg, sdk: c, api: apiclient.NewAPIClient(ac), log: cfg.Logger,
		boxes: map[string]*sdk.Sandbox{}, previews: map[string]remote.Endpoint{},
	}, nil
}

// Name implements remote.API.
func (a *API) Name() string { return Name }

// auth gives ctx the API key, as the API client takes it.
func (a *API) auth(ctx context.Context) context.Context {
	return context.WithValue(ctx, apiclient.ContextAccessToken, a.cfg.APIKey)
}

// maxLabels bounds the labels of a sandbox.
const maxLabels = 32

// Create implements remote.API. A name Daytona already has (409) is a
// retry after a lost answer: the sandbox the first call made is
// returned, once it has started.
func (a *API) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	if len(req.Labels) > maxLabels {
		return remote.Machine{}, fmt.Errorf("%w: daytona: %d labels, at most %d", errdefs.ErrBadInput, len(req.Labels), maxLabels)
	}
	blockAll, allowList, err := egress(req.Network)
	if err != nil {
		return remote.Machine{}, err
	}
	base := types.SandboxBaseParams{
		Name:             req.Name,
		NetworkBlockAll:  blockAll,
		NetworkAllowList: allowList,
		Labels:           maps.Clone(req.Labels),
		// The toolbox acts as root, so that the daemon does: it owns
		// the machine, as on every provider, and runs commands as
		// DefaultUser.
		User:             "root",
		AutoStopInterval: ptr(minutes(a.cfg.AutoStop)),
	}
	snapshot, image := a.cfg.Snapshot, a.cfg.Image
	switch {
	case isImageRef(req.Image):
		snapshot, image = "", req.Image
	case req.Image != "":
		snapshot, image = req.Image, ""
	}
	sized := req.CPU > 0 || req.Memory > 0 || req.Disk > 0
	var params any
	if image != "" {
		p := types.ImageParams{SandboxBaseParams: base, Image: image}
		if sized {
			p.Resources = &types.Resources{CPU: ceilDiv(req.CPU, 1), Memory: gib(req.Memory), Disk: gib(req.Disk)}
		}
		params = p
	} else {
		if sized {
			return remote.Machine{}, fmt.Errorf("%w: daytona: a sandbox from a snapshot has the snapshot's size; set the provider's image to size sandboxes", errdefs.ErrUnsupported)
		}
		params = types.SnapshotParams{SandboxBaseParams: base, Snapshot: snapshot}
	}
	now := time.Now()
	box, err := a.sdk.Create(ctx, params, options.WithTimeout(requestTimeout))
	if err != nil {
		err = classify("create sandbox", err, a.cfg.APIKey)
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			return remote.Machine{}, err
		}
		return a.findStarted(ctx, req.Name)
	}
	a.remember(box)
	return remote.Machine{
		ID: box.ID, Name: req.Name, Labels: maps.Clone(req.Labels),
		State: remote.MachineRunning, CreatedAt: now, ExpiresAt: a.expiry(now),
	}, nil
}

// expiry is when auto-stop ends a sandbox last active at t, or zero.
func (a *API) expiry(t time.Time) time.Time {
	if a.cfg.AutoStop == 0 {
		return time.Time{}
	}
	return t.Add(time.Duration(minutes(a.cfg.AutoStop)) * time.Minute)
}

// findStarted finds the sandbox named name and waits, as long as ctx
// lets it, while it is being made.
func (a *API) findStarted(ctx context.Context, name string) (remote.Machine, error) {
	for {
		sb, err := a.get(ctx, name)
		if err != nil {
			return remote.Machine{}, err
		}
		if !starting(sb.GetState()) {
			return a.machine(sb), nil
		}
		select {
		case <-ctx.Done():
			return remote.Machine{}, fmt.Errorf("%w: daytona: sandbox %s still %s", errdefs.ErrProviderUnavailable, name, sb.GetState())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// get is Daytona's sandbox named name; one it is destroying, or whose
// id alone is name, is not found.
func (a *API) get(ctx context.Context, name string) (*apiclient.Sandbox, error) {
	sb, resp, err := a.api.SandboxAPI.GetSandbox(a.auth(ctx), name).Execute()
	if err != nil {
		return nil, classifyAPI("get sandbox", err, resp, a.cfg.APIKey)
	}
	if sb.GetName() != name || gone(sb.GetState()) {
		return nil, fmt.Errorf("%w: daytona: no sandbox named %q", errdefs.ErrNotFound, name)
	}
	return sb, nil
}

// Find implements remote.API.
func (a *API) Find(ctx context.Context, name string) (remote.Machine, error) {
	sb, err := a.get(ctx, name)
	if err != nil {
		return remote.Machine{}, err
	}
	return a.machine(sb), nil
}

// Bounds of a listing: pages of listPage sandboxes, at most maxPages.
const (
	listPage = 100
	maxPages = 100
)

// List implements remote.API.
func (a *API) List(ctx context.Context, labels map[string]string) ([]remote.Machine, error) {
	filter, err := json.Marshal(labels)
	if err != nil {
		return nil, fmt.Errorf("%w: daytona: labels: %v", errdefs.ErrBadInput, err)
	}
	var out []remote.Machine
	for page := 1; page <= maxPages; page++ {
		res, resp, err := a.api.SandboxAPI.ListSandboxesPaginated(a.auth(ctx)).
			Labels(string(filter)).Page(float32(page)).Limit(listPage).Execute()
		if err != nil {
			return nil, classifyAPI("list sandboxes", err, resp, a.cfg.APIKey)
		}
		for _, sb := range res.GetItems() {
			if gone(sb.GetState()) || !carries(sb.GetLabels(), labels) {
				continue
			}
			out = append(out, a.machine(&sb))
		}
		if float32(page) >= res.GetTotalPages() || len(res.GetItems()) == 0 {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: daytona: more than %d sandboxes carry %v", errdefs.ErrProviderUnavailable, listPage*maxPages, labels)
}

func carries(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// Delete implements remote.API.
func (a *API) Delete(ctx context.Context, m remote.Machine) error {
	_, resp, err := a.api.SandboxAPI.DeleteSandbox(a.auth(ctx), m.ID).Execute()
	a.forget(m.ID)
	if err != nil {
		if err := classifyAPI("delete sandbox", err, resp, a.cfg.APIKey); !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return nil
}

// maxUpload bounds a file Upload sends (the daemon is a few MiB).
const maxUpload = 64 << 20

// Upload implements remote.API: the toolbox makes the file's parent
// directories, and its mode is set after.
func (a *API) Upload(ctx context.Context, m remote.Machine, p string, r io.Reader) error {
	data, err := io.ReadAll(io.LimitReader(r, maxUpload+1))
	if err != nil {
		return fmt.Errorf("daytona: upload %s: %w", p, err)
	}
	if len(data) > maxUpload {
		return fmt.Errorf("%w: daytona: upload %s: more than %d MiB", errdefs.ErrBadInput, p, maxUpload>>20)
	}
	box, err := a.box(ctx, m)
	if err != nil {
		return err
	}
	if err := box.FileSystem.UploadFile(ctx, data, p); err != nil {
		return classify("upload "+path.Base(p), err, a.cfg.APIKey)
	}
	if err := box.FileSystem.SetFilePermissions(ctx, p, options.WithPermissionMode("755")); err != nil {
		return classify("chmod "+path.Base(p), err, a.cfg.APIKey)
	}
	return nil
}

// session is the toolbox session berth's background commands run in.
const session = "berth"

// Start implements remote.API: the command runs in the background of
// a toolbox session, detached from it (nohup, its own input and
// output), with env assigned by the session's shell, so that no argv
// holds it.
func (a *API) Start(ctx context.Context, m remote.Machine, argv []string, env map[string]string) error {
	box, err := a.box(ctx, m)
	if err != nil {
		return err
	}
	if err := box.Process.CreateSession(ctx, session); err != nil {
		// A session that exists is a restarted worker's, or a retry's.
		if err := classify("create session", err, a.cfg.APIKey); !errors.Is(err, errdefs.ErrAlreadyExists) && !errors.Is(err, errdefs.ErrBadInput) {
			return err
		}
	}
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(env))
	for _, k := range keys {
		if !validEnvName(k) {
			return fmt.Errorf("%w: daytona: environment variable name %q", errdefs.ErrBadInput, k)
		}
		fmt.Fprintf(&b, "%s=%s ", k, shellQuote(env[k]))
	}
	b.WriteString("nohup")
	for _, arg := range argv {
		b.WriteString(" ")
		b.WriteString(shellQuote(arg))
	}
	b.WriteString(" </dev/null >/dev/null 2>&1 &")
	if _, err := box.Process.ExecuteSessionCommand(ctx, session, b.String(), true, true); err != nil {
		return classify("start command", err, a.cfg.APIKey)
	}
	return nil
}

// Endpoint implements remote.API: the port's preview URL, its token in
// a header. Both are asked once per sandbox and port.
func (a *API) Endpoint(ctx context.Context, m remote.Machine, port int) (remote.Endpoint, error) {
	key := fmt.Sprintf("%s/%d", m.ID, port)
	a.mu.Lock()
	ep, ok := a.previews[key]
	a.mu.Unlock()
	if ok {
		return ep, nil
	}
	box, err := a.box(ctx, m)
	if err != nil {
		return remote.Endpoint{}, err
	}
	link, err := box.GetPreviewLink(ctx, port)
	if err != nil {
		return remote.Endpoint{}, classify("preview link", err, a.cfg.APIKey)
	}
	ep = remote.Endpoint{URL: strings.TrimRight(link.URL, "/"), Header: http.Header{}}
	if link.Token != "" {
		ep.Header.Set("X-Daytona-Preview-Token", link.Token)
	}
	a.mu.Lock()
	a.previews[key] = ep
	a.mu.Unlock()
	return ep, nil
}

// KeepAlive implements remote.API. Only auto-stop ends a Daytona
// sandbox by itself: the interval is raised to cover d, if it must, and
// the sandbox's activity renewed.
func (a *API) KeepAlive(ctx context.Context, m remote.Machine, d time.Duration) error {
	if a.cfg.AutoStop == 0 {
		return nil
	}
	if want := max(minutes(d), minutes(a.cfg.AutoStop)); want > minutes(a.cfg.AutoStop) {
		_, resp, err := a.api.SandboxAPI.SetAutostopInterval(a.auth(ctx), m.ID, float32(want)).Execute()
		if err != nil {
			return classifyAPI("set auto-stop", err, resp, a.cfg.APIKey)
		}
	}
	resp, err := a.api.SandboxAPI.UpdateLastActivity(a.auth(ctx), m.ID).Execute()
	if err != nil {
		return classifyAPI("update last activity", err, resp, a.cfg.APIKey)
	}
	return nil
}

// Check implements remote.Checker: the cheapest listing there is.
func (a *API) Check(ctx context.Context) error {
	_, resp, err := a.api.SandboxAPI.ListSandboxesPaginated(a.auth(ctx)).Limit(1).Execute()
	if err != nil {
		return classifyAPI("list sandboxes", err, resp, a.cfg.APIKey)
	}
	return nil
}

// box is the SDK's handle of m's sandbox, asked of Daytona once.
func (a *API) box(ctx context.Context, m remote.Machine) (*sdk.Sandbox, error) {
	a.mu.Lock()
	box, ok := a.boxes[m.ID]
	a.mu.Unlock()
	if ok {
		return box, nil
	}
	box, err := a.sdk.Get(ctx, m.ID)
	if err != nil {
		return nil, classify("get sandbox", err, a.cfg.APIKey)
	}
	a.remember(box)
	return box, nil
}

func (a *API) remember(box *sdk.Sandbox) {
	a.mu.Lock()
	a.boxes[box.ID] = box
	a.mu.Unlock()
}

func (a *API) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.boxes, id)
	for k := range a.previews {
		if strings.HasPrefix(k, id+"/") {
			delete(a.previews, k)
		}
	}
}

// machine is sb as package remote sees it.
func (a *API) machine(sb *apiclient.Sandbox) remote.Machine {
	m := remote.Machine{ID: sb.GetId(), Name: sb.GetName(), Labels: maps.Clone(sb.GetLabels()), State: stateOf(sb.GetState())}
	delete(m.Labels, types.CodeToolboxLanguageLabel) // the SDK's, not berth's
	if t, err := time.Parse(time.RFC3339, sb.GetCreatedAt()); err == nil {
		m.CreatedAt = t
	}
	if n := sb.GetAutoStopInterval(); n > 0 && m.State == remote.MachineRunning {
		last := m.CreatedAt
		if t, err := time.Parse(time.RFC3339, sb.GetLastActivityAt()); err == nil {
			last = t
		}
		m.ExpiresAt = last.Add(time.Duration(n) * time.Minute)
	}
	return m
}

func stateOf(s apiclient.SandboxState) remote.MachineState {
	switch s {
	case apiclient.SANDBOXSTATE_STARTED:
		return remote.MachineRunning
	case apiclient.SANDBOXSTATE_STOPPED, apiclient.SANDBOXSTATE_STOPPING,
		apiclient.SANDBOXSTATE_ARCHIVED, apiclient.SANDBOXSTATE_ARCHIVING:
		return remote.MachineStopped
	case apiclient.SANDBOXSTATE_ERROR, apiclient.SANDBOXSTATE_BUILD_FAILED:
		return remote.MachineFailed
	}
	if starting(s) {
		return remote.MachineRunning // soon: the daemon's answer tells
	}
	return remote.MachineFailed
}

func starting(s apiclient.SandboxState) bool {
	switch s {
	case apiclient.SANDBOXSTATE_CREATING, apiclient.SANDBOXSTATE_STARTING, apiclient.SANDBOXSTATE_RESTORING,
		apiclient.SANDBOXSTATE_PENDING_BUILD, apiclient.SANDBOXSTATE_BUILDING_SNAPSHOT, apiclient.SANDBOXSTATE_PULLING_SNAPSHOT:
		return true
	}
	return false
}

func gone(s apiclient.SandboxState) bool {
	return s == apiclient.SANDBOXSTATE_DESTROYED || s == apiclient.SANDBOXSTATE_DESTROYING
}

// isImageRef tells an image reference ("python:3.12",
// "ghcr.io/x/y") from a snapshot's name.
func isImageRef(s string) bool { return strings.ContainsAny(s, "/:@") }

// minutes is d in whole minutes, rounded up.
func minutes(d time.Duration) int {
	return int((max(d, 0) + time.Minute - 1) / time.Minute)
}

// gib is n bytes in whole GiB, rounded up.
func gib(n int64) int { return int((max(n, 0) + 1<<30 - 1) >> 30) }

// ceilDiv is x in whole units of u, rounded up.
func ceilDiv(x, u float64) int {
	n := int(x / u)
	if float64(n)*u < x {
		n++
	}
	return n
}

func ptr[T any](v T) *T { return &v }

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

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
