package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/remote/remoteinit"
	"github.com/berth-dev/berth/sandboxd"
)

// Berth's own labels, on every machine beside the spec's.
const (
	// LabelSandbox names the sandbox the machine serves: the reaper
	// lists machines by it.
	LabelSandbox  = "berth.sandbox"
	labelLifetime = "berth.lifetime" // Spec.Lifetime, in seconds
	labelLease    = "berth.lease"    // Spec.Lease, in milliseconds
)

// NamePrefix starts the name of every machine: the rest is the sandbox id.
const NamePrefix = "berth-"

// Provider is a provider.Provider over a hosted service's API.
type Provider struct {
	api         API
	pauser      Pauser      // the API's own pause, or nil
	snapshotter Snapshotter // the API's filesystem snapshots, or nil
	cfg         Config
	err         error // the Config's, returned by every call

	mu       sync.Mutex
	machines map[string]*machine // by sandbox id
	creating map[string]*sync.Mutex
	endings  map[string]*time.Timer // by sandbox id: see endPaused
}

// New returns a provider whose sandboxes are machines of api, each
// running berth-sandboxd. A Config it cannot use makes every call fail
// with its error. When api is a Checker, the provider is a
// provider.Checker whose Check is the API's.
func New(api API, cfg Config) provider.Provider {
	p := &Provider{api: api, machines: map[string]*machine{}, creating: map[string]*sync.Mutex{}, endings: map[string]*time.Timer{}}
	p.pauser, _ = api.(Pauser)
	p.snapshotter, _ = api.(Snapshotter)
	p.err = cfg.setDefaults()
	p.cfg = cfg
	c, checks := api.(Checker)
	switch {
	case checks && p.snapshotter != nil:
		return &checkedWaker{checkedProvider{Provider: p, checker: c}, waker{p}}
	case checks:
		return &checkedProvider{Provider: p, checker: c}
	case p.snapshotter != nil:
		return &wakerProvider{p, waker{p}}
	}
	return p
}

// checkedProvider is a Provider whose API can be checked: a type of
// its own, so that a provider over an API that cannot be is no
// provider.Checker.
type checkedProvider struct {
	*Provider
	checker Checker
}

var (
	_ provider.Provider = (*Provider)(nil)
	_ provider.Checker  = (*checkedProvider)(nil)
)

// Check implements provider.Checker: the API's.
func (p *checkedProvider) Check(ctx context.Context) error { return p.checker.Check(ctx) }

// Name implements provider.Provider: the API's.
func (p *Provider) Name() string { return p.api.Name() }

// Capabilities implements provider.Provider. Limits are the service's
// to enforce, and berth cannot tell that it does; so is the network,
// where the API hands the service a policy (NetworkPolicer).
func (p *Provider) Capabilities() provider.Capabilities {
	c := provider.Capabilities{Pause: true, Image: true, MaxLifetime: p.cfg.MaxLifetime, Hibernate: p.snapshotter != nil}
	if s, ok := p.networkSupport(); ok {
		c.Network, c.NetworkAllow = s.Open, s.Hosts || s.CIDRs
	}
	return c
}

// machine is what the provider keeps of one sandbox's machine, shared
// by every handle on it.
type machine struct {
	id   string
	name string

	mu        sync.Mutex
	m         Machine
	client    *sandboxd.Client
	destroyed bool // by a handle of this provider
	paused    bool // by the API's own Pause, through this provider
}

func (mc *machine) snapshot() Machine {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.m
}

// machineFor returns the shared state of sandbox id, described by m.
func (p *Provider) machineFor(id string, m Machine) *machine {
	p.mu.Lock()
	defer p.mu.Unlock()
	mc, ok := p.machines[id]
	if !ok || mc.m.ID != m.ID {
		if ok && mc.client != nil {
			mc.client.Close()
		}
		mc = &machine{id: id, name: m.Name}
		p.machines[id] = mc
	}
	mc.mu.Lock()
	mc.m = m
	mc.destroyed = false
	mc.mu.Unlock()
	return mc
}

// lockCreate serialises the creations of one id in this process.
func (p *Provider) lockCreate(id string) func() {
	p.mu.Lock()
	l, ok := p.creating[id]
	if !ok {
		l = &sync.Mutex{}
		p.creating[id] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	sb, err := p.create(ctx, spec, "")
	if err != nil {
		return nil, err
	}
	return p.public(sb), nil
}

// create makes spec's machine, from the API's snapshot when snapshot is
// not empty, and starts its daemon; or finds what an earlier call made.
func (p *Provider) create(ctx context.Context, spec provider.Spec, snapshot string) (*sandbox, error) {
	if p.err != nil {
		return nil, p.err
	}
	if err := provider.ValidateSpec(spec); err != nil {
		return nil, err
	}
	switch {
	case spec.RootFS != "":
		return nil, fmt.Errorf("%w: %s: a root filesystem on berth's host cannot reach a hosted machine (use Image)", errdefs.ErrUnsupported, p.Name())
	case spec.Resources.Pids != 0:
		return nil, fmt.Errorf("%w: %s: no process limit", errdefs.ErrUnsupported, p.Name())
	}
	if err := p.checkNetwork(spec.Network); err != nil {
		return nil, err
	}
	if spec.ID == "" {
		spec.ID = records.NewID()
	}
	if spec.Lifetime == 0 {
		spec.Lifetime = provider.DefaultLifetime
	}
	defer p.lockCreate(spec.ID)()
	name := NamePrefix + spec.ID

	m, err := p.api.Find(ctx, name)
	switch {
	case err == nil:
		// Made by an earlier Create, whose answer may have been lost
		// before its daemon started.
		sb, err := p.handle(ctx, spec.ID, m)
		if err != nil {
			return nil, err
		}
		if err := p.ensureDaemon(ctx, sb, spec); err != nil {
			return nil, err
		}
		return sb, nil
	case !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelSandbox] = spec.ID
	labels[labelLifetime] = strconv.FormatInt(int64(spec.Lifetime/time.Second), 10)
	if spec.Lease > 0 {
		labels[labelLease] = strconv.FormatInt(spec.Lease.Milliseconds(), 10)
	}
	m, err = p.api.Create(ctx, CreateRequest{
		Name: name, Labels: labels, Image: spec.Image, Snapshot: snapshot,
		CPU: spec.Resources.CPU, Memory: spec.Resources.Memory, Disk: spec.Resources.Disk,
		Lifetime: min(spec.Lifetime, p.maxLifetime()),
		Network:  spec.Network,
	})
	if err != nil {
		return nil, err
	}
	sb, err := p.handle(ctx, spec.ID, m)
	if err == nil {
		err = p.startDaemon(ctx, sb, spec)
	}
	if err != nil {
		// The machine is of no use without its daemon: it goes, and a
		// retry makes it again.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := p.api.Delete(dctx, m); derr != nil {
			p.cfg.Logger.Warn("remote: deleting a machine whose daemon did not start", "machine", name, "err", derr)
		}
		p.forget(spec.ID)
		return nil, err
	}
	return sb, nil
}

// ensureDaemon starts the daemon in a machine that exists, unless it
// answers already.
func (p *Provider) ensureDaemon(ctx context.Context, sb *sandbox, spec provider.Spec) error {
	if sb.healthy(ctx, 3*time.Second) == nil {
		return nil
	}
	m := sb.mc.snapshot()
	if m.State != MachineRunning {
		return fmt.Errorf("%w: %s: its machine is %s", errdefs.ErrSandboxLost, sb.id, m.State)
	}
	// What the first Create was asked is on the machine; the rest of
	// spec, a retry's, is the same request.
	spec.Lifetime, spec.Lease = lifetimeOf(m), leaseOf(m)
	return p.startDaemon(ctx, sb, spec)
}

// startDaemon uploads the daemon into the machine, starts it, and waits
// for it to answer.
func (p *Provider) startDaemon(ctx context.Context, sb *sandbox, spec provider.Spec) error {
	m := sb.mc.snapshot()
	f, err := os.Open(p.cfg.DaemonPath)
	if err != nil {
		return fmt.Errorf("%s: the daemon to upload: %w", p.Name(), err)
	}
	defer f.Close()
	if err := p.api.Upload(ctx, m, p.cfg.RemotePath, f); err != nil {
		return fmt.Errorf("upload the daemon: %w", err)
	}
	token := p.cfg.token(m.Name)
	conf, err := json.Marshal(remoteinit.Config{
		Token: token, Workspace: p.cfg.Workspace, User: p.cfg.User,
		Env: spec.Env, Dir: spec.Dir, Lease: spec.Lease,
		ExpiresAt: expiresAt(m, spec.Lifetime),
		// A machine with no time limit of the service's ends by the
		// daemon's hand.
		EndMachine: m.ExpiresAt.IsZero(),
	})
	if err != nil {
		return err
	}
	argv := []string{p.cfg.RemotePath, remoteinit.Arg, "--listen", ":" + strconv.Itoa(p.cfg.Port)}
	if err := p.api.Start(ctx, m, argv, map[string]string{remoteinit.ConfigEnv: string(conf)}); err != nil {
		return fmt.Errorf("start the daemon: %w", redact(err, token))
	}
	return sb.waitReady(ctx, p.cfg.ReadyTimeout)
}

// redact keeps a secret out of an error that quotes it, keeping its kind.
func redact(err error, secret string) error {
	if err == nil || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errdefs.Errorf(errdefs.KindOf(err), "%s", strings.ReplaceAll(err.Error(), secret, "[token]"))
}

// maxLifetime is the longest the service keeps a machine.
func (p *Provider) maxLifetime() time.Duration {
	if p.cfg.MaxLifetime > 0 {
		return p.cfg.MaxLifetime
	}
	return math.MaxInt64
}

// expiresAt is when the sandbox on m ends.
func expiresAt(m Machine, lifetime time.Duration) time.Time {
	return m.CreatedAt.Add(lifetime)
}

func lifetimeOf(m Machine) time.Duration {
	if n, err := strconv.ParseInt(m.Labels[labelLifetime], 10, 64); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return provider.DefaultLifetime
}

func leaseOf(m Machine) time.Duration {
	if n, err := strconv.ParseInt(m.Labels[labelLease], 10, 64); err == nil && n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	return 0
}

// ended deletes m if it is a machine the service keeps though its
// sandbox's lifetime has passed, and says whether it was one. A
// service's time limit is the lifetime of a running machine, whose
// daemon ends it too; but a service may not count the time of a paused
// or stopped machine (E2B does not), which then ends when berth next
// sees it: every pass of berth's reaper lists each provider.
func (p *Provider) ended(ctx context.Context, m Machine) bool {
	if m.State == MachineRunning || time.Now().Before(expiresAt(m, lifetimeOf(m))) {
		return false
	}
	if err := p.api.Delete(ctx, m); err != nil {
		p.cfg.Logger.Warn("remote: delete a machine past its lifetime", "provider", p.Name(), "machine", m.Name, "error", err)
		return false
	}
	p.forget(m.Labels[LabelSandbox])
	return true
}

// endPaused ends the machine of sandbox id at its lifetime if it is
// paused or stopped then, for a service that does not count that time:
// while this process lives, the machine ends on time without a call;
// after, the next call or reaper pass that sees it ends it (ended).
func (p *Provider) endPaused(id string, m Machine) {
	p.armEnd(id, m.Name, time.Until(expiresAt(m, lifetimeOf(m))), endTries)
}

// endTries bounds how often endDue asks the service again after a
// failure (endRetry apart) before it leaves the machine to the reaper.
const (
	endTries = 12
	endRetry = 5 * time.Second
)

func (p *Provider) armEnd(id, name string, d time.Duration, tries int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.endings[id]; ok {
		t.Stop()
	}
	p.endings[id] = time.AfterFunc(d, func() { p.endDue(id, name, tries) })
}

// endDue ends the machine name if its lifetime has passed and it is not
// running; one whose lifetime has not passed (the Machine endPaused was
// given may not have known when it was made) is looked at again then.
func (p *Provider) endDue(id, name string, tries int) {
	p.mu.Lock()
	delete(p.endings, id)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	m, err := p.api.Find(ctx, name)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return
	case err != nil:
		if tries > 1 {
			p.armEnd(id, name, endRetry, tries-1)
		}
		return
	case m.State == MachineRunning:
		return // its daemon ends it
	}
	if left := time.Until(expiresAt(m, lifetimeOf(m))); left > 0 {
		p.armEnd(id, name, left, tries)
		return
	}
	if !p.ended(ctx, m) && tries > 1 {
		p.armEnd(id, name, endRetry, tries-1)
	}
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, id string) (provider.Sandbox, error) {
	if p.err != nil {
		return nil, p.err
	}
	if err := provider.ValidateID(id); err != nil {
		return nil, err
	}
	m, err := p.api.Find(ctx, NamePrefix+id)
	if err != nil {
		return nil, err
	}
	if m.Labels[LabelSandbox] != id || p.ended(ctx, m) {
		return nil, fmt.Errorf("%w: sandbox %s", errdefs.ErrNotFound, id)
	}
	sb, err := p.handle(ctx, id, m)
	if err != nil {
		return nil, err
	}
	return p.public(sb), nil
}

// List implements provider.Provider. A machine's state is the
// service's word: a machine whose daemon is gone shows as lost in its
// Info, not here.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]provider.Info, error) {
	if p.err != nil {
		return nil, p.err
	}
	ms, err := p.api.List(ctx, labels)
	if err != nil {
		return nil, err
	}
	infos := make([]provider.Info, 0, len(ms))
	var wg sync.WaitGroup
	slots := make(chan struct{}, listProbes)
	for _, m := range ms {
		id := m.Labels[LabelSandbox]
		if id == "" || m.Name != NamePrefix+id {
			continue // not berth's
		}
		if p.ended(ctx, m) {
			continue
		}
		infos = append(infos, p.info(id, m))
		info := &infos[len(infos)-1]
		switch m.State {
		case MachineRunning:
			// Only the daemon knows whether it serves, or paused the
			// sandbox.
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				info.State = p.probe(ctx, id, m)
			})
		case MachinePaused:
			info.State = provider.StatePaused
		default:
			info.State = provider.StateLost
		}
	}
	wg.Wait()
	return infos, nil
}

// listProbes bounds how many daemons List asks at once.
const listProbes = 8

// probe asks the daemon of sandbox id on running machine m how it is.
func (p *Provider) probe(ctx context.Context, id string, m Machine) provider.State {
	sb, err := p.handle(ctx, id, m)
	if err != nil {
		return provider.StateLost
	}
	return sb.daemonState(ctx)
}

// info describes the sandbox id on m, but for its state.
func (p *Provider) info(id string, m Machine) provider.Info {
	labels := maps.Clone(m.Labels)
	for k := range labels {
		if k == LabelSandbox || k == labelLifetime || k == labelLease {
			delete(labels, k)
		}
	}
	return provider.Info{
		ID: id, Provider: p.Name(), Labels: labels,
		CreatedAt: m.CreatedAt, ExpiresAt: expiresAt(m, lifetimeOf(m)), Lease: leaseOf(m),
	}
}

// client returns the shared client of mc's daemon.
func (p *Provider) client(ctx context.Context, mc *machine) (*sandboxd.Client, error) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	if mc.client != nil {
		return mc.client, nil
	}
	ep, err := p.api.Endpoint(ctx, mc.m, p.cfg.Port)
	if err != nil {
		return nil, err
	}
	h := ep.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Authorization", "Bearer "+p.cfg.token(mc.m.Name))
	rt := ep.Transport
	if rt == nil {
		rt = p.cfg.Transport
	}
	c, err := sandboxd.NewHTTPClient(ep.URL, h, rt)
	if err != nil {
		return nil, err
	}
	mc.client = c
	return c, nil
}

// forget drops what the provider keeps of sandbox id.
func (p *Provider) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if mc, ok := p.machines[id]; ok {
		mc.mu.Lock()
		if mc.client != nil {
			mc.client.Close()
			mc.client = nil
		}
		mc.destroyed = true
		mc.mu.Unlock()
		delete(p.machines, id)
	}
}
