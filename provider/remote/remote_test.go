package remote_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptrace"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/randid"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/provider/remote/remoteinit"
)

// counting counts the requests to the daemons, and the connections
// they opened, through the Endpoint's transport.
type counting struct {
	trips, conns atomic.Int64
	rt           http.RoundTripper
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.trips.Add(1)
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			c.conns.Add(1)
		}
	}}
	return c.rt.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
}

// wrapped is an API whose calls a test watches or breaks.
type wrapped struct {
	remote.API
	count *counting

	mu          sync.Mutex
	creates     int
	loseCreate  int // the first loseCreate Creates make their machine, then fail
	failStart   bool
	expiresIn   time.Duration // the service ends its machines this long after Create
	keepAlives  []time.Duration
	startConfig []string // the daemon's configuration, as each Start sent it
}

func (w *wrapped) Create(ctx context.Context, req remote.CreateRequest) (remote.Machine, error) {
	m, err := w.API.Create(ctx, req)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.creates++
	if err == nil && w.creates <= w.loseCreate {
		return remote.Machine{}, fmt.Errorf("%w: the answer was lost", errdefs.ErrProviderUnavailable)
	}
	if err == nil && w.expiresIn > 0 {
		m.ExpiresAt = time.Now().Add(w.expiresIn)
	}
	return m, err
}

func (w *wrapped) KeepAlive(ctx context.Context, m remote.Machine, d time.Duration) error {
	w.mu.Lock()
	w.keepAlives = append(w.keepAlives, d)
	w.mu.Unlock()
	return w.API.KeepAlive(ctx, m, d)
}

func (w *wrapped) Start(ctx context.Context, m remote.Machine, argv []string, env map[string]string) error {
	w.mu.Lock()
	w.startConfig = append(w.startConfig, env[remoteinit.ConfigEnv])
	fail := w.failStart
	w.mu.Unlock()
	if fail {
		// As a careless service would: its error quotes the request.
		return fmt.Errorf("%w: start %q with env %v: refused", errdefs.ErrProviderUnavailable, argv, env)
	}
	return w.API.Start(ctx, m, argv, env)
}

func (w *wrapped) Endpoint(ctx context.Context, m remote.Machine, port int) (remote.Endpoint, error) {
	ep, err := w.API.Endpoint(ctx, m, port)
	if err != nil || w.count == nil {
		return ep, err
	}
	w.count.rt = ep.Transport
	if w.count.rt == nil {
		w.count.rt = http.DefaultTransport
	}
	ep.Transport = w.count
	return ep, nil
}

// tokens are the bearer tokens the daemons were started with.
func (w *wrapped) tokens(t *testing.T) []string {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, raw := range w.startConfig {
		var c remoteinit.Config
		if err := json.Unmarshal([]byte(raw), &c); err != nil || c.Token == "" {
			t.Fatalf("the daemon's configuration: %v", err)
		}
		out = append(out, c.Token)
	}
	return out
}

func testSpec(t *testing.T) provider.Spec {
	return provider.Spec{ID: "rt-" + randid.Hex(4), Labels: map[string]string{"test": t.Name()}}
}

func create(t *testing.T, p provider.Provider, spec provider.Spec) provider.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { sb.Destroy(context.WithoutCancel(t.Context())) })
	return sb
}

// TestRoundTrips counts the requests to the daemon: a command is one,
// a file written is one, and both go over the connection Create left
// open.
func TestRoundTrips(t *testing.T) {
	c := &counting{}
	p := open(t, &wrapped{API: remotefake.NewAPI(farm), count: c})
	sb := create(t, p, testSpec(t))
	t.Logf("Create: %d requests to the daemon, %d connections", c.trips.Load(), c.conns.Load())
	if c.trips.Load() < 1 {
		t.Errorf("Create asked the daemon nothing: it must wait for it to answer")
	}

	trips, conns := c.trips.Load(), c.conns.Load()
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Exec: %v, exit %d", err, res.ExitCode)
	}
	if n := c.trips.Load() - trips; n != 1 {
		t.Errorf("Exec: %d requests to the daemon, want 1", n)
	}
	if n := c.conns.Load() - conns; n != 0 {
		t.Errorf("Exec: %d new connections, want 0", n)
	}
	t.Logf("Exec: %d request, %d new connections", c.trips.Load()-trips, c.conns.Load()-conns)

	trips, conns = c.trips.Load(), c.conns.Load()
	if err := sb.WriteFile(t.Context(), "f", strings.NewReader("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := c.trips.Load() - trips; n != 1 {
		t.Errorf("WriteFile: %d requests to the daemon, want 1", n)
	}
	if n := c.conns.Load() - conns; n != 0 {
		t.Errorf("WriteFile: %d new connections, want 0", n)
	}
	t.Logf("WriteFile: %d request, %d new connections", c.trips.Load()-trips, c.conns.Load()-conns)

	trips = c.trips.Load()
	for range 10 {
		if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.trips.Load() - trips; n != 10 {
		t.Errorf("10 Execs: %d requests, want 10", n)
	}
}

// TestCreateAnswerLost: a Create whose machine was made but whose answer
// was lost is retried, and the retry finds that machine: one machine,
// which serves.
func TestCreateAnswerLost(t *testing.T) {
	w := &wrapped{API: remotefake.NewAPI(farm), loseCreate: 1}
	p := open(t, w)
	spec := testSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	if _, err := p.Create(t.Context(), spec); !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("the first Create: %v, want the lost answer's ErrProviderUnavailable", err)
	}
	sb := create(t, p, spec)
	if sb.ID() != spec.ID {
		t.Errorf("ID %q, want %q", sb.ID(), spec.ID)
	}
	if out := sh(t, sb, "echo served"); out != "served\n" {
		t.Errorf("the sandbox serves %q", out)
	}
	infos, err := p.List(t.Context(), map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 {
		t.Errorf("List finds %d sandboxes after a retried Create, want 1", len(infos))
	}
	if w.creates != 1 {
		t.Errorf("%d Creates reached the API, want 1: the retry finds the machine", w.creates)
	}
}

// TestCreateFailsCleanly: a machine whose daemon cannot be started is
// deleted, and the error (which the service's own quoted the token in)
// carries no token.
func TestCreateFailsCleanly(t *testing.T) {
	w := &wrapped{API: remotefake.NewAPI(farm), failStart: true}
	p := open(t, w)
	spec := testSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	_, err := p.Create(t.Context(), spec)
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("Create: %v, want the service's ErrProviderUnavailable", err)
	}
	for _, tok := range w.tokens(t) {
		if strings.Contains(err.Error(), tok) {
			t.Errorf("Create's error carries the token: %v", err)
		}
	}
	infos, err := p.List(t.Context(), map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("the machine whose daemon did not start is still there: %v", infos)
	}
}

// TestWrongToken: a provider with another secret reaches the machine
// but not its daemon: 401, ErrProviderAuth, and neither token in the
// error.
func TestWrongToken(t *testing.T) {
	w := &wrapped{API: remotefake.NewAPI(farm)}
	sb := create(t, open(t, w), testSpec(t))
	other := remote.New(w, remote.Config{DaemonPath: daemon, Secret: []byte("another secret")})
	sb2, err := other.Get(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	_, err = sb2.Exec(t.Context(), provider.ExecRequest{Shell: "echo ran > ran"})
	if !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Fatalf("Exec with the wrong token: %v, want ErrProviderAuth", err)
	}
	for _, tok := range w.tokens(t) {
		if strings.Contains(err.Error(), tok) {
			t.Errorf("the error carries the token: %v", err)
		}
	}
	if strings.Contains(err.Error(), "Bearer ") {
		t.Errorf("the error quotes a bearer header: %v", err)
	}
	if _, err := sb.ListDir(t.Context(), "ran"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the command refused ran anyway: ListDir(ran) = %v", err)
	}

	// As anyone who reaches the port would ask.
	rm := sb.(interface{ Machine() remote.Machine }).Machine()
	ep, err := w.Endpoint(t.Context(), rm, remote.DefaultPort)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: ep.Transport}
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + w.tokens(t)[0] + "x"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, ep.URL+"/v1/health", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /v1/health with Authorization %q: %s, want 401", auth, resp.Status)
		}
	}
}

// TestTokenHidden: the token is in no process's argv in the machine
// (ps, as a command sees it), nor in the daemon's argv or environment as
// the host's /proc shows them.
func TestTokenHidden(t *testing.T) {
	w := &wrapped{API: remotefake.NewAPI(farm)}
	sb := create(t, open(t, w), testSpec(t))
	tok := w.tokens(t)[0]
	ps := sh(t, sb, "ps -eo args; cat /proc/*/cmdline /proc/*/environ 2>/dev/null | tr '\\0' ' '")
	if !strings.Contains(ps, "berth-sandboxd serve") {
		t.Fatalf("ps does not show the daemon: %q", ps)
	}
	if strings.Contains(ps, tok) {
		t.Errorf("a command in the machine sees the token")
	}
	pid := daemonPID(t, sb)
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), tok) {
			t.Errorf("the daemon's /proc/%d/%s holds the token", pid, f)
		}
	}
}

// TestDaemonGone: a machine whose daemon was killed is lost: Info says
// so, and an operation fails with ErrSandboxLost; one whose machine was
// deleted behind the provider's back fails alike.
func TestDaemonGone(t *testing.T) {
	p := open(t, remotefake.NewAPI(farm))
	sb := create(t, p, testSpec(t))
	if err := syscall.Kill(daemonPID(t, sb), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	info, err := sb.Info(ctx)
	if err != nil || info.State != provider.StateLost {
		t.Errorf("Info of a sandbox whose daemon is dead: %v, state %q; want lost", err, info.State)
	}
	sb2, err := p.Get(ctx, sb.ID())
	if err != nil {
		t.Fatalf("Get of a lost sandbox: %v", err)
	}
	if _, err := sb2.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("Exec in a sandbox whose daemon is dead: %v, want ErrSandboxLost", err)
	}

	sb3 := create(t, p, testSpec(t))
	if err := machineOf(t, sb3).Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb3.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("Exec in a sandbox whose machine was deleted: %v, want ErrSandboxLost", err)
	}
}

// TestRefused: what the provider cannot honour is refused as such.
func TestRefused(t *testing.T) {
	p := open(t, remotefake.NewAPI(farm))
	for name, spec := range map[string]provider.Spec{
		"RootFS": {RootFS: "/srv/root"},
		"Pids":   {Resources: provider.Resources{Pids: 100}},
		"Open":   {Network: provider.Network{Mode: provider.NetworkOpen}},
	} {
		if sb, err := p.Create(t.Context(), spec); !errors.Is(err, errdefs.ErrUnsupported) {
			if err == nil {
				sb.Destroy(t.Context())
			}
			t.Errorf("Create with %s: %v, want ErrUnsupported", name, err)
		}
	}
}

func sh(t *testing.T, sb provider.Sandbox, script string) string {
	t.Helper()
	var out strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: script, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: %v, exit %d, output %q", script, err, res.ExitCode, out.String())
	}
	return out.String()
}

// TestKeepAlive: a machine the service would end before the sandbox's
// lifetime is kept alive by a Renew, once, not by every Renew, and
// never past the sandbox's lifetime.
func TestKeepAlive(t *testing.T) {
	w := &wrapped{API: remotefake.NewAPI(farm), expiresIn: 5 * time.Minute}
	spec := testSpec(t)
	spec.Lifetime, spec.Lease = 90*time.Minute, time.Minute
	sb := create(t, open(t, w), spec)
	for range 5 {
		if err := sb.(provider.Leaser).Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.keepAlives) != 1 {
		t.Fatalf("5 Renews made %d KeepAlives, want 1", len(w.keepAlives))
	}
	if d := w.keepAlives[0]; d <= 0 || d > 90*time.Minute {
		t.Errorf("KeepAlive for %v: want more than none, and no more than the sandbox's lifetime", d)
	}

	long := &wrapped{API: remotefake.NewAPI(farm), expiresIn: 3 * time.Hour}
	sb = create(t, open(t, long), testSpec(t))
	if err := sb.(provider.Leaser).Renew(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(long.keepAlives) != 0 {
		t.Errorf("a machine far from its end was kept alive: %v", long.keepAlives)
	}
}

// pausing is an API whose service pauses machines itself, with their
// memory, as a remote.Pauser.
type pausing struct {
	remote.API
	pauses, resumes atomic.Int64
}

func (a *pausing) Pause(ctx context.Context, m remote.Machine) error {
	a.pauses.Add(1)
	fm, err := farm.Machine(m.ID)
	if err != nil {
		return err
	}
	return fm.Pause(ctx)
}

func (a *pausing) Resume(ctx context.Context, m remote.Machine) error {
	a.resumes.Add(1)
	fm, err := farm.Machine(m.ID)
	if err != nil {
		return err
	}
	return fm.Resume(ctx)
}

// TestNativePause: over an API that pauses machines, Pause is the
// service's: the machine is paused (its daemon with it), Info says so
// through this provider and another, operations fail at once with
// ErrSandboxPaused, and Resume brings back what ran.
func TestNativePause(t *testing.T) {
	api := &pausing{API: remotefake.NewAPI(farm)}
	p := open(t, api)
	sb := create(t, p, testSpec(t))
	sh(t, sb, "echo kept > f")
	pz := sb.(provider.Pauser)
	if err := pz.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	if api.pauses.Load() != 1 || !machineOf(t, sb).Paused() {
		t.Fatalf("Pause did not pause the machine through the API (%d calls)", api.pauses.Load())
	}
	for _, q := range []provider.Provider{p, open(t, api)} {
		h, err := q.Get(t.Context(), sb.ID())
		if err != nil {
			t.Fatal(err)
		}
		if info, err := h.Info(t.Context()); err != nil || info.State != provider.StatePaused {
			t.Errorf("Info of a paused machine: %v, state %q; want paused", err, info.State)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxPaused) {
		t.Errorf("Exec in a paused sandbox: %v, want ErrSandboxPaused", err)
	}
	if err := pz.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := sh(t, sb, "cat f"); out != "kept\n" {
		t.Errorf("after Resume, f = %q", out)
	}
}

// TestDaemonNeverAnswers: a machine whose daemon does not come up within
// ReadyTimeout fails Create with a retryable error, and is deleted.
func TestDaemonNeverAnswers(t *testing.T) {
	// /bin/true, uploaded as the daemon, starts and exits at once.
	p := remote.New(remotefake.NewAPI(farm), remote.Config{DaemonPath: "/bin/true", Secret: testSecret, ReadyTimeout: time.Second})
	spec := testSpec(t)
	spec.Labels["case"] = randid.Hex(6)
	sb, err := p.Create(t.Context(), spec)
	if err == nil {
		sb.Destroy(t.Context())
	}
	if !errors.Is(err, errdefs.ErrProviderUnavailable) {
		t.Fatalf("Create with a daemon that never answers: %v, want ErrProviderUnavailable", err)
	}
	infos, err := p.List(t.Context(), map[string]string{"case": spec.Labels["case"]})
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 0 {
		t.Errorf("the machine whose daemon never answered is still there: %v", infos)
	}
}

// checking is a pausing API whose service a test makes answer, or not.
type checking struct {
	*pausing
	calls atomic.Int64
	err   atomic.Pointer[error]
}

func (a *checking) Check(ctx context.Context) error {
	a.calls.Add(1)
	if err := a.err.Load(); err != nil {
		return *err
	}
	return ctx.Err()
}

// TestCheck: a provider is a provider.Checker when its API is a Checker,
// and not otherwise; its Check is the API's, errors and all; and it is
// the same provider besides, the API's own pause kept.
func TestCheck(t *testing.T) {
	if _, ok := open(t, remotefake.NewAPI(farm)).(provider.Checker); ok {
		t.Error("a provider over an API that is no Checker is a provider.Checker")
	}
	api := &checking{pausing: &pausing{API: remotefake.NewAPI(farm)}}
	p := open(t, api)
	c, ok := p.(provider.Checker)
	if !ok {
		t.Fatal("a provider over a Checker API is no provider.Checker")
	}
	if err := c.Check(t.Context()); err != nil || api.calls.Load() != 1 {
		t.Errorf("Check of a service that answers: %v after %d calls to the API's, want nil after 1", err, api.calls.Load())
	}
	refused := fmt.Errorf("fake: list: 401: %w", errdefs.ErrProviderAuth)
	api.err.Store(&refused)
	if err := c.Check(t.Context()); !errors.Is(err, errdefs.ErrProviderAuth) || err.Error() != refused.Error() {
		t.Errorf("Check of a service refusing the key: %v, want the API's %v", err, refused)
	}
	api.err.Store(nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Check(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a context cancelled: %v; the API's Check did not get it", err)
	}

	if p.Name() != "remotefake" || !p.Capabilities().Pause {
		t.Errorf("the checked provider: name %q, capabilities %+v", p.Name(), p.Capabilities())
	}
	sb := create(t, p, testSpec(t))
	if out := sh(t, sb, "echo ok"); out != "ok\n" {
		t.Errorf("a command in a sandbox of the checked provider: %q", out)
	}
	if err := sb.(provider.Pauser).Pause(t.Context()); err != nil || api.pauses.Load() != 1 {
		t.Errorf("Pause: %v, %d pauses by the API; want the API's own", err, api.pauses.Load())
	}
}
