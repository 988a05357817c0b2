package hostworker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
	_ "github.com/berth-dev/berth/provider/e2b" // registers "e2b" in the worker processes
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/sandbox"
)

// The e2b tests run berth on the provider "e2b" against e2bfake, in
// this process beside an embedded Temporal server, with every worker a
// process of its own (this test binary, running TestE2BWorkerProcess),
// so that a test can kill one with SIGKILL. The workers reach the
// fake's sandboxes through a gate of the test's, which sees the
// daemons' tokens pass and can hold a request for as long as the test
// needs.

// e2bWorkerEnv carries a worker process's configuration (e2bWorkerConfig
// in JSON).
const e2bWorkerEnv = "BERTH_TEST_E2B_WORKER"

// e2bWorkerConfig is what a worker process serves, and where.
type e2bWorkerConfig struct {
	Address    string        `json:"address"`
	DataDir    string        `json:"data_dir"`
	HostQueue  string        `json:"host_queue"`
	APIURL     string        `json:"api_url"`
	SandboxURL string        `json:"sandbox_url"`
	Daemon     string        `json:"daemon"`
	Heartbeat  time.Duration `json:"heartbeat"`
	ReapEvery  time.Duration `json:"reap_every"`
}

// e2bReady is what a worker process logs once it serves.
const e2bReady = "e2b worker is ready"

// TestE2BWorkerProcess is the worker process of the e2b tests: it does
// nothing unless e2bWorkerEnv configures it, and then serves until it is
// killed or interrupted, logging to stderr at debug level (which the
// tests read for secrets).
func TestE2BWorkerProcess(t *testing.T) {
	raw := os.Getenv(e2bWorkerEnv)
	if raw == "" {
		return // not a worker process
	}
	var cfg e2bWorkerConfig
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
		Providers: []string{"e2b"},
		ProviderConfig: map[string]provider.Config{"e2b": {
			"api-url": cfg.APIURL, "sandbox-url": cfg.SandboxURL, "daemon": cfg.Daemon, "max-lifetime": "24h",
		}},
		ReapEvery: cfg.ReapEvery, HeartbeatTimeout: cfg.Heartbeat, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	log.Info(e2bReady, "host-queue", h.HostQueue)
	<-ctx.Done()
	h.Close()
}

// e2bWorld is an embedded Temporal server, a fake E2B with its farm of
// machines, the daemon the workers upload, and the gate between the
// workers and the sandboxes.
type e2bWorld struct {
	addr   string
	c      client.Client
	farm   *remotefake.Farm
	fake   *e2bfake.Server
	gate   *gate
	daemon string
	// key is the E2B API key, secret the daemons' tokens' secret: only
	// the workers' environment holds them.
	key, secret string
}

// newE2BWorld starts the server, the fake and the gate for the test.
func newE2BWorld(t *testing.T, key, secret string) *e2bWorld {
	t.Helper()
	if out, err := exec.Command("../provider/remote/remotefake/testdata/build-image.sh").CombinedOutput(); err != nil {
		t.Fatalf("build the machines' image: %v\n%s", err, out)
	}
	w := &e2bWorld{key: key, secret: secret, daemon: buildDaemon(t, t.TempDir())}
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
	return w
}

// e2bWorker is a worker process.
type e2bWorker struct {
	cmd    *exec.Cmd
	log    *testkit.SyncBuffer
	exited chan struct{}
}

// startWorker starts a worker process serving e2b with host queue
// hostQueue, and waits until it serves. It is interrupted when the test
// ends, and its log shown if the test failed.
func (w *e2bWorld) startWorker(t *testing.T, name, hostQueue string, reapEvery time.Duration) *e2bWorker {
	t.Helper()
	conf, err := json.Marshal(e2bWorkerConfig{
		Address: w.addr, DataDir: shortDataDir(t), HostQueue: hostQueue,
		APIURL: w.fake.URL(), SandboxURL: w.gate.URL(), Daemon: w.daemon,
		Heartbeat: 5 * time.Second, ReapEvery: reapEvery,
	})
	if err != nil {
		t.Fatal(err)
	}
	p := &e2bWorker{log: new(testkit.SyncBuffer), exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^TestE2BWorkerProcess$", "-test.count=1")
	p.cmd.Env = append(os.Environ(), e2bWorkerEnv+"="+string(conf), "E2B_API_KEY="+w.key, "BERTH_E2B_SECRET="+w.secret)
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
	for !strings.Contains(p.log.String(), e2bReady) {
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
func (p *e2bWorker) kill(t *testing.T) {
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
func (w *e2bWorld) activityOn(t *testing.T, id, name string, p *e2bWorker) bool {
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
func (w *e2bWorld) machine(t *testing.T) *remotefake.Machine {
	t.Helper()
	ids := w.fake.Sandboxes()
	if len(ids) != 1 {
		t.Fatalf("the fake's sandboxes: %v, want one", ids)
	}
	m, err := w.farm.Machine(ids[0])
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
