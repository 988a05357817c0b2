package hostworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/daytona" // registers "daytona" in the worker processes
	_ "github.com/berth-dev/berth/provider/e2b"     // and "e2b"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/sandbox"
)

// The e2b and daytona tests run berth on a remote provider against its
// fake, in this process beside an embedded Temporal server, with every
// worker a process of its own (this test binary, running
// TestRemoteWorkerProcess), so that a test can kill one with SIGKILL.
// The workers reach the fake through a gate of the test's, which sees
// the tokens that pass and can hold a request for as long as the test
// needs: E2B's sandboxes' host (envd and the daemons), Daytona's API.

// workerEnv carries a worker process's configuration (workerConfig in
// JSON).
const workerEnv = "BERTH_TEST_REMOTE_WORKER"

// workerConfig is what a worker process serves, and where.
type workerConfig struct {
	Address   string          `json:"address"`
	DataDir   string          `json:"data_dir"`
	HostQueue string          `json:"host_queue"`
	Provider  string          `json:"provider"`
	Settings  provider.Config `json:"settings"`
	Heartbeat time.Duration   `json:"heartbeat"`
	ReapEvery time.Duration   `json:"reap_every"`
}

// workerReady is what a worker process logs once it serves.
const workerReady = "remote worker is ready"

// TestRemoteWorkerProcess is the worker process of the e2b and daytona
// tests: it does nothing unless workerEnv configures it, and then
// serves until it is killed or interrupted, logging to stderr at debug
// level (which the tests read for secrets).
func TestRemoteWorkerProcess(t *testing.T) {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		return // not a worker process
	}
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := client.DialContext(ctx, client.Options{HostPort: cfg.Address, Logger: hostworker.Logger(log.With("component", "sdk"))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := hostworker.StartHost(ctx, c, hostworker.HostConfig{
		DataDir: cfg.DataDir, Queue: sandbox.DefaultQueue, HostQueue: cfg.HostQueue,
		Providers:      []string{cfg.Provider},
		ProviderConfig: map[string]provider.Config{cfg.Provider: cfg.Settings},
		ReapEvery:      cfg.ReapEvery, HeartbeatTimeout: cfg.Heartbeat, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	log.Info(workerReady, "provider", cfg.Provider, "host-queue", h.HostQueue)
	<-ctx.Done()
	h.Close()
}

// remoteWorld is an embedded Temporal server, a farm of machines, the
// daemon the workers upload, the gate, and what the workers of one
// remote provider are given: its settings and environment. A world of
// one provider (e2bWorld, daytonaWorld) adds its fake.
type remoteWorld struct {
	addr   string
	c      client.Client
	farm   *remotefake.Farm
	gate   *gate
	daemon string
	// provider is the provider the workers serve, settings its settings
	// (but its daemon's path) and env what their environment adds: the
	// API key and the daemons' secret, which only it holds.
	provider string
	settings provider.Config
	env      []string
	// sandboxes are the fake's sandboxes, machineOf the machine of one
	// (an error while it has none yet).
	sandboxes func() []string
	machineOf func(id string) (*remotefake.Machine, error)
	// creates counts the sandboxes the service was asked to make.
	creates func() int
	// holdCreate makes the Create activities that follow wait in a
	// request they make after the service has made the machine and
	// before they complete: held gets a value for each request held,
	// and release (which may be called again) lets the rest go by.
	// midCreate names the request.
	holdCreate func(t *testing.T) (held <-chan struct{}, release func())
	midCreate  string
}

// holdAtGate is a holdCreate for a world whose gate sees the request
// pick picks.
func (w *remoteWorld) holdAtGate(pick func(*http.Request) bool) func(t *testing.T) (<-chan struct{}, func()) {
	return func(t *testing.T) (<-chan struct{}, func()) {
		w.gate.setHold(pick)
		return w.gate.held, func() { w.gate.setHold(nil) }
	}
}

// newRemoteWorld starts the server and the farm for the test, and builds
// the daemon.
func newRemoteWorld(t *testing.T) *remoteWorld {
	t.Helper()
	if out, err := exec.Command("../provider/remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
		t.Fatalf("build the machines' image: %v\n%s", err, out)
	}
	w := &remoteWorld{daemon: buildDaemon(t)}
	srv, err := devserver.Start(t.Context(), devserver.Options{
		DataDir: t.TempDir(), Address: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	w.addr = srv.Address()
	if w.c, err = client.Dial(client.Options{HostPort: w.addr, Logger: hostworker.Logger(slog.New(slog.DiscardHandler))}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.c.Close)
	if w.farm, err = remotefake.NewFarm(t.Context(), remotefake.Options{Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.farm.Close() })
	return w
}

// e2bWorld is a remoteWorld serving e2b, over a fake E2B whose
// sandboxes' host is behind the gate.
type e2bWorld struct {
	*remoteWorld
	fake *e2bfake.Server
	// key is the E2B API key, secret the daemons' tokens' secret: only
	// the workers' environment holds them.
	key, secret string
}

// newE2BWorld starts the server, the fake and the gate for the test.
func newE2BWorld(t *testing.T, key, secret string) *e2bWorld {
	t.Helper()
	w := &e2bWorld{remoteWorld: newRemoteWorld(t), key: key, secret: secret}
	var err error
	if w.fake, err = e2bfake.New(t.Context(), e2bfake.Options{Farm: w.farm, APIKey: key, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake kills its sandboxes' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests or answers against E2B's spec:\n%s", strings.Join(v, "\n"))
		}
	})
	w.gate = newGate(t, w.fake.SandboxURL())
	w.provider = "e2b"
	w.settings = provider.Config{"api-url": w.fake.URL(), "sandbox-url": w.gate.URL(), "max-lifetime": "24h"}
	w.env = []string{"E2B_API_KEY=" + key, "BERTH_E2B_SECRET=" + secret}
	w.sandboxes = w.fake.Sandboxes
	w.machineOf = w.farm.Machine
	w.creates = func() int { return w.fake.Requests("POST /sandboxes") }
	w.holdCreate = w.holdAtGate(func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == "/files" })
	w.midCreate = "the daemon's upload"
	return w
}

// remoteWorker is a worker process.
type remoteWorker struct {
	cmd    *exec.Cmd
	log    *testkit.SyncBuffer
	exited chan struct{}
}

// startWorker starts a worker process serving the world's provider with
// host queue hostQueue, and waits until it serves. It is interrupted
// when the test ends, and its log shown if the test failed.
func (w *remoteWorld) startWorker(t *testing.T, name, hostQueue string, reapEvery time.Duration) *remoteWorker {
	t.Helper()
	settings := maps.Clone(w.settings)
	settings["daemon"] = w.daemon
	conf, err := json.Marshal(workerConfig{
		Address: w.addr, DataDir: shortDataDir(t), HostQueue: hostQueue,
		Provider: w.provider, Settings: settings,
		Heartbeat: 5 * time.Second, ReapEvery: reapEvery,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &remoteWorker{log: new(testkit.SyncBuffer), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestRemoteWorkerProcess$", "-test.count=1")
	p.cmd.Env = append(append(os.Environ(), workerEnv+"="+string(conf)), w.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s:\n%s", name, p.log.String())
		}
	})
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(p.log.String(), workerReady) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited:\n%s", name, p.log.String())
		case <-deadline:
			t.Fatalf("%s did not come up:\n%s", name, p.log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return p
}

// kill kills the worker with SIGKILL and waits until it is dead.
func (p *remoteWorker) kill(t *testing.T) {
	t.Helper()
	p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("a killed worker did not exit")
	}
}

// activityOn says whether workflow id's activity of type name is
// running on worker p.
func (w *remoteWorld) activityOn(t *testing.T, id, name string, p *remoteWorker) bool {
	t.Helper()
	desc, err := w.c.DescribeWorkflowExecution(t.Context(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range desc.PendingActivities {
		if a.GetActivityType().GetName() == name && a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED &&
			strings.HasPrefix(a.GetLastWorkerIdentity(), strconv.Itoa(p.cmd.Process.Pid)+"@") {
			return true
		}
	}
	return false
}

// machine is the farm's machine of the fake's only sandbox.
func (w *remoteWorld) machine(t *testing.T) *remotefake.Machine {
	t.Helper()
	ids := w.sandboxes()
	if len(ids) != 1 {
		t.Fatalf("the fake's sandboxes: %v, want one", ids)
	}
	m, err := w.machineOf(ids[0])
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gate is a reverse proxy in front of the fake's sandbox host (every
// sandbox's ports): it records the daemons' bearer tokens and envd's
// access tokens that pass, and holds the requests hold picks until
// their client goes.
type gate struct {
	srv     *httptest.Server
	mu      sync.Mutex
	hold    func(*http.Request) bool
	held    chan struct{} // gets a value for each request held
	release chan struct{} // closed as the test ends: no more holding
	seen    map[string]bool
}

func newGate(t *testing.T, target string) *gate {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{held: make(chan struct{}, 16), release: make(chan struct{}), seen: map[string]bool{}}
	// To the fake's own host: its validator routes by it.
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, FlushInterval: -1}
	g.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && tok != "" {
			g.seen[tok] = true
		}
		if tok := r.Header.Get("X-Access-Token"); tok != "" {
			g.seen[tok] = true
		}
		hold := g.hold != nil && g.hold(r)
		g.mu.Unlock()
		if hold {
			g.held <- struct{}{}
			// Read to its end, or the server does not see a client
			// that dies go.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-g.release:
			}
			return
		}
		proxy.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() {
		close(g.release)
		g.srv.Close()
	})
	return g
}

func (g *gate) URL() string { return g.srv.URL }

// setHold makes the gate hold the requests f picks; nil holds none.
func (g *gate) setHold(f func(*http.Request) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold = f
}

// tokens are the tokens that passed the gate.
func (g *gate) tokens() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for tok := range g.seen {
		out = append(out, tok)
	}
	return out
}

// machineHas says whether machine m has a file at name.
func machineHas(t *testing.T, m *remotefake.Machine, name string) bool {
	t.Helper()
	r, err := m.ReadFile(t.Context(), name)
	if err != nil {
		return false
	}
	r.Close()
	return true
}

// writeMachineFile writes a file of machine m.
func writeMachineFile(t *testing.T, m *remotefake.Machine, name, data string) {
	t.Helper()
	if err := m.WriteFile(t.Context(), name, bytes.NewReader([]byte(data)), 0o644); err != nil {
		t.Fatal(err)
	}
}
