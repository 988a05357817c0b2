// Package e2b runs berth's sandboxes on E2B (e2b.dev): it implements
// [remote.API], [remote.Pauser] and [remote.Checker] over E2B's control
// API and envd (package e2bapi), and package remote turns that into a
// berth provider by uploading berth-sandboxd into each sandbox and
// reaching it through E2B's port proxy.
//
// A machine is an E2B sandbox. Its name is kept in the sandbox's
// metadata under "berth.name", beside its labels, so Find and Create list
// by it: a Create retried after a lost answer finds the sandbox the
// first one made. Its image is an E2B template. E2B sizes a sandbox by
// its template, so CreateRequest's CPU, Memory and Disk are refused with
// errdefs.ErrUnsupported: build a template of the size wanted. A
// machine's Lifetime is E2B's timeout, which E2B caps by the team's plan
// (1 hour on Hobby, 24 on Pro): it is cut to Config.MaxLifetime, and
// KeepAlive moves it on. E2B's timeout runs only while a sandbox runs:
// a paused one is kept until it is deleted or resumed. Processes are
// started without envd's Connect-Timeout-Ms, which would kill them when
// it passed.
//
// The API key comes from the worker's environment (E2B_API_KEY unless
// api-key-env names another variable) or a file (api-key-file), never
// from provider.Config's values, which may enter workflow history; no
// error quotes it.
package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b/e2bapi"
	"github.com/berth-dev/berth/provider/internal/settings"
	"github.com/berth-dev/berth/provider/remote"
)

// MetadataName is the metadata key of a sandbox's machine name.
const MetadataName = "berth.name"

// Defaults of Config.
const (
	DefaultTemplate    = "base"
	DefaultAPIKeyEnv   = "E2B_API_KEY"
	DefaultMaxLifetime = time.Hour // the Hobby plan's cap, which every plan allows
	// minResume is the least a resumed sandbox is kept for.
	minResume = 5 * time.Minute
)

// Config configures the E2B API.
type Config struct {
	// APIURL is E2B's control API; empty means e2bapi.DefaultAPIURL.
	APIURL string
	// Domain is the sandboxes' domain (https://{port}-{id}.{domain});
	// empty means the one each sandbox reports, else e2b.app.
	Domain string
	// SandboxURL, when set, is one stable host for every sandbox's
	// ports, routed by the E2b-Sandbox-Id and E2b-Sandbox-Port headers.
	SandboxURL string
	// Template is the template of a CreateRequest with no Image; empty
	// means DefaultTemplate.
	Template string
	// APIKey is the team's key. It is set from the environment or a file
	// by ParseConfig, never from a setting's text.
	APIKey string
	// MaxLifetime caps a machine's Lifetime and KeepAlive to what the
	// team's plan allows; zero means DefaultMaxLifetime.
	MaxLifetime time.Duration
	// LifetimeGrace is how much longer than its Lifetime E2B keeps a
	// machine; zero means none: E2B ends it at its lifetime.
	LifetimeGrace time.Duration
	// HTTPClient carries the requests; nil means a client of its own.
	HTTPClient *http.Client
	Logger     *slog.Logger
}

// ParseConfig reads the provider's settings: api-url, domain,
// sandbox-url, template, max-lifetime and lifetime-grace (Go
// durations), and where the
// key is: api-key-env (the variable's name, default E2B_API_KEY) or
// api-key-file (a file holding it). A missing key is
// errdefs.ErrProviderAuth.
func ParseConfig(pc provider.Config) (Config, error) {
	var c Config
	keyEnv, keyFile := DefaultAPIKeyEnv, ""
	if err := settings.Decode("e2b", pc, map[string]settings.Setting{
		"api-url":        settings.String(&c.APIURL),
		"domain":         settings.String(&c.Domain),
		"sandbox-url":    settings.String(&c.SandboxURL),
		"template":       settings.String(&c.Template),
		"max-lifetime":   settings.Duration(&c.MaxLifetime),
		"lifetime-grace": settings.Duration(&c.LifetimeGrace),
		"api-key-env":    settings.String(&keyEnv),
		"api-key-file":   settings.String(&keyFile),
	}); err != nil {
		return c, err
	}
	key, err := settings.APIKey("e2b", pc, keyEnv, keyFile)
	c.APIKey = key
	return c, err
}

// API is E2B as a remote.API and remote.Pauser.
type API struct {
	c   *e2bapi.Client
	cfg Config
	log *slog.Logger

	mu   sync.Mutex
	refs map[string]e2bapi.SandboxRef // by sandbox id: its tokens
}

var (
	_ remote.API     = (*API)(nil)
	_ remote.Pauser  = (*API)(nil)
	_ remote.Checker = (*API)(nil)
)

// New returns the API over E2B.
func New(cfg Config) (*API, error) {
	if cfg.Template == "" {
		cfg.Template = DefaultTemplate
	}
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	cfg.LifetimeGrace = max(cfg.LifetimeGrace, 0)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := e2bapi.New(e2bapi.Options{APIURL: cfg.APIURL, Domain: cfg.Domain, SandboxURL: cfg.SandboxURL, APIKey: cfg.APIKey, HTTPClient: cfg.HTTPClient})
	if err != nil {
		return nil, err
	}
	return &API{c: c, cfg: cfg, log: cfg.Logger, refs: map[string]e2bapi.SandboxRef{}}, nil
}

// Name implements remote.API.
func (a *API) Name() string { return "e2b" }

// Check implements remote.Checker: E2B's cheapest listing, one sandbox.
func (a *API) Check(ctx context.Context) error { return a.c.Check(ctx) }

// Bounds on what a machine's name and labels may be.
const (
	maxName   = 200
	maxLabels = 32
)

// Create implements remote.API.
func (a *API) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	if req.Name == "" || len(req.Name) > maxName {
		return remote.Machine{}, fmt.Errorf("%w: e2b: machine name of %d bytes", errdefs.ErrBadInput, len(req.Name))
	}
	if req.CPU != 0 || req.Memory != 0 || req.Disk != 0 {
		return remote.Machine{}, fmt.Errorf("%w: e2b sizes a sandbox by its template: build a template of the size wanted", errdefs.ErrUnsupported)
	}
	if len(req.Labels) > maxLabels {
		return remote.Machine{}, fmt.Errorf("%w: e2b: %d labels, at most %d", errdefs.ErrBadInput, len(req.Labels), maxLabels)
	}
	if _, ok := req.Labels[MetadataName]; ok {
		return remote.Machine{}, fmt.Errorf("%w: e2b: the label %s is the provider's", errdefs.ErrBadInput, MetadataName)
	}
	if m, err := a.Find(ctx, req.Name); err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return m, err
	}
	template := req.Image
	if template == "" {
		template = a.cfg.Template
	}
	md := maps.Clone(req.Labels)
	if md == nil {
		md = map[string]string{}
	}
	md[MetadataName] = req.Name
	lifetime := a.lifetime(req.Lifetime)
	secure, no := true, false
	internet, network, err := egress(req.Network)
	if err != nil {
		return remote.Machine{}, err
	}
	// Before the call, so that ExpiresAt is no later than E2B's end.
	now := time.Now()
	sb, err := a.c.CreateSandbox(ctx, e2bapi.NewSandbox{
		TemplateID: template, Timeout: ptr(e2bapi.Seconds(lifetime)),
		AutoPause: &no, Secure: &secure, Metadata: md,
		AllowInternetAccess: &internet, Network: network,
	})
	if err != nil {
		return remote.Machine{}, err
	}
	a.remember(sb.Ref())
	return remote.Machine{
		ID: sb.SandboxID, Name: req.Name, Labels: maps.Clone(req.Labels),
		State: remote.MachineRunning, CreatedAt: now, ExpiresAt: now.Add(lifetime),
	}, nil
}

func ptr[T any](v T) *T { return &v }

// lifetime is the E2B timeout for a machine to last d: d and
// LifetimeGrace, at most MaxLifetime, zero meaning it.
func (a *API) lifetime(d time.Duration) time.Duration {
	if d <= 0 {
		return a.cfg.MaxLifetime
	}
	return min(d+a.cfg.LifetimeGrace, a.cfg.MaxLifetime)
}

// Find implements remote.API.
func (a *API) Find(ctx context.Context, name string) (remote.Machine, error) {
	list, err := a.c.ListSandboxes(ctx, e2bapi.ListOptions{
		Metadata: map[string]string{MetadataName: name},
		States:   []e2bapi.SandboxState{e2bapi.StateRunning, e2bapi.StatePaused},
	})
	if err != nil {
		return remote.Machine{}, err
	}
	var found []remote.Machine
	for _, sb := range list {
		if sb.Metadata[MetadataName] == name {
			found = append(found, machine(sb))
		}
	}
	if len(found) == 0 {
		return remote.Machine{}, fmt.Errorf("%w: e2b: no sandbox named %q", errdefs.ErrNotFound, name)
	}
	// Two would be a Create not made by this provider: the oldest is
	// the one.
	slices.SortFunc(found, func(x, y remote.Machine) int { return x.CreatedAt.Compare(y.CreatedAt) })
	if len(found) > 1 {
		a.log.Warn("e2b: several sandboxes carry one name", "name", name, "count", len(found), "kept", found[0].ID)
	}
	return found[0], nil
}

// List implements remote.API.
func (a *API) List(ctx context.Context, labels map[string]string) ([]remote.Machine, error) {
	list, err := a.c.ListSandboxes(ctx, e2bapi.ListOptions{
		Metadata: labels,
		States:   []e2bapi.SandboxState{e2bapi.StateRunning, e2bapi.StatePaused},
	})
	if err != nil {
		return nil, err
	}
	var out []remote.Machine
	for _, sb := range list {
		if _, ok := sb.Metadata[MetadataName]; !ok {
			continue // not berth's
		}
		m := machine(sb)
		match := true
		for k, v := range labels {
			match = match && m.Labels[k] == v
		}
		if match {
			out = append(out, m)
		}
	}
	return out, nil
}

// machine is a listed sandbox as a remote.Machine.
func machine(sb e2bapi.ListedSandbox) remote.Machine {
	labels := maps.Clone(sb.Metadata)
	name := labels[MetadataName]
	delete(labels, MetadataName)
	state := remote.MachineRunning
	if sb.State == e2bapi.StatePaused {
		state = remote.MachinePaused
	}
	return remote.Machine{ID: sb.SandboxID, Name: name, Labels: labels, State: state, CreatedAt: sb.StartedAt, ExpiresAt: sb.EndAt}
}

// Delete implements remote.API.
func (a *API) Delete(ctx context.Context, m remote.Machine) error {
	err := a.c.KillSandbox(ctx, m.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		err = nil
	}
	if err == nil {
		a.mu.Lock()
		delete(a.refs, m.ID)
		a.mu.Unlock()
	}
	return err
}

func (a *API) remember(r e2bapi.SandboxRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refs[r.ID] = r
}

// ref returns what reaching m's envd takes, asking E2B for its tokens
// the first time (a worker that restarted).
func (a *API) ref(ctx context.Context, m remote.Machine) (e2bapi.SandboxRef, error) {
	a.mu.Lock()
	r, ok := a.refs[m.ID]
	a.mu.Unlock()
	if ok {
		return r, nil
	}
	d, err := a.c.GetSandbox(ctx, m.ID)
	if err != nil {
		return r, err
	}
	r = e2bapi.SandboxRef{ID: d.SandboxID, EnvdAccessToken: d.EnvdAccessToken}
	if d.Domain != nil {
		r.Domain = *d.Domain
	}
	a.remember(r)
	return r, nil
}

// runLimit bounds the output kept of a helper command.
const runLimit = 4 << 10

// Upload implements remote.API: envd's POST /files as root, then a chmod.
func (a *API) Upload(ctx context.Context, m remote.Machine, p string, r io.Reader) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%w: e2b: upload path %q is not clean and absolute", errdefs.ErrBadInput, p)
	}
	ref, err := a.ref(ctx, m)
	if err != nil {
		return err
	}
	if _, err := a.c.Upload(ctx, ref, p, "root", r); err != nil {
		return err
	}
	res, err := a.c.Run(ctx, ref, e2bapi.StartRequest{
		Process: e2bapi.ProcessConfig{Cmd: "chmod", Args: []string{"0755", p}}, Stdin: ptr(false),
	}, e2bapi.StartOptions{User: "root", Timeout: time.Minute}, runLimit)
	if err != nil {
		return err
	}
	if res.End.ExitCode != 0 || !res.End.Exited {
		return fmt.Errorf("e2b: chmod %s: %s: %s", p, res.End.Status, oneLine(res.Stderr))
	}
	return nil
}

// Start implements remote.API: envd's Start as root, with no
// Connect-Timeout-Ms (which would kill the process when it passed),
// read until envd says the process started.
func (a *API) Start(ctx context.Context, m remote.Machine, argv []string, env map[string]string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("%w: e2b: no command", errdefs.ErrBadInput)
	}
	ref, err := a.ref(ctx, m)
	if err != nil {
		return err
	}
	_, err = a.c.StartDetached(ctx, ref, e2bapi.StartRequest{
		Process: e2bapi.ProcessConfig{Cmd: argv[0], Args: argv[1:], Envs: env, Cwd: ptr("/")},
		Stdin:   ptr(false),
	}, e2bapi.StartOptions{User: "root"})
	return err
}

// Endpoint implements remote.API: E2B's proxy to the port, with the
// routing and traffic token headers it needs.
func (a *API) Endpoint(ctx context.Context, m remote.Machine, port int) (remote.Endpoint, error) {
	a.mu.Lock()
	ref, ok := a.refs[m.ID]
	a.mu.Unlock()
	if !ok {
		ref = e2bapi.SandboxRef{ID: m.ID}
	}
	u, h, err := a.c.PortURL(ref, port)
	if err != nil {
		return remote.Endpoint{}, err
	}
	return remote.Endpoint{URL: u, Header: h}, nil
}

// KeepAlive implements remote.API: E2B's /timeout, which sets the end
// from now, so it is sent only when it moves the end on. A paused
// sandbox has no running timeout to move.
func (a *API) KeepAlive(ctx context.Context, m remote.Machine, d time.Duration) error {
	d = a.lifetime(d)
	det, err := a.c.GetSandbox(ctx, m.ID)
	if err != nil {
		return err
	}
	if det.State == e2bapi.StatePaused || det.EndAt.After(time.Now().Add(d)) {
		return nil
	}
	return a.c.SetTimeout(ctx, m.ID, d)
}

// Pause implements remote.Pauser: E2B's pause, memory kept. A sandbox
// paused already is not an error.
func (a *API) Pause(ctx context.Context, m remote.Machine) error {
	err := a.c.PauseSandbox(ctx, m.ID)
	var apiErr *e2bapi.Error
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusConflict {
		if det, gerr := a.c.GetSandbox(ctx, m.ID); gerr == nil && det.State == e2bapi.StatePaused {
			return nil
		}
	}
	return err
}

// Resume implements remote.Pauser: E2B's connect, which resumes a
// paused sandbox and keeps it until the machine's ExpiresAt (at least
// minResume, at most MaxLifetime).
func (a *API) Resume(ctx context.Context, m remote.Machine) error {
	d := a.lifetime(max(time.Until(m.ExpiresAt), minResume))
	sb, _, err := a.c.ConnectSandbox(ctx, m.ID, d)
	if err != nil {
		return err
	}
	a.remember(sb.Ref())
	return nil
}

// oneLine is b's first line, bounded.
func oneLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
