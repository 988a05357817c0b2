package hostworker_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/gke"
	"github.com/berth-dev/berth/provider/gke/gkefake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// gkeWorld is a remoteWorld serving gke, over a fake cluster whose
// sandbox router is behind the gate (its API, and the port forward to
// the daemons, are not).
type gkeWorld struct {
	*remoteWorld
	fake *gkefake.Server
	// executes counts the runtime's /execute requests through the gate.
	executes atomic.Int32
}

// newGKEWorld starts the server, the fake and the gate for the test;
// the workers' kubeconfig holds token, their daemons' secret is secret.
func newGKEWorld(t *testing.T, token, secret string) *gkeWorld {
	t.Helper()
	w := &gkeWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = gkefake.New(t.Context(), gkefake.Options{Farm: w.farm, Token: token, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake removes its pods' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests against the Kubernetes API or the router:\n%s", strings.Join(v, "\n"))
		}
	})
	if err := w.fake.AddTemplate("default", "berth-runtime"); err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := w.fake.Kubeconfig(kc, "fake"); err != nil {
		t.Fatal(err)
	}
	w.gate = newGate(t, w.fake.RouterURL())
	w.provider = "gke"
	w.settings = provider.Config{"kubeconfig": kc, "template": "berth-runtime", "router-url": w.gate.URL()}
	w.env = []string{"BERTH_GKE_SECRET=" + secret}
	w.sandboxes = func() []string { return w.fake.Sandboxes("default") }
	w.machineOf = func(name string) (*remotefake.Machine, error) {
		if m, ok := w.fake.Machine("default", name); ok {
			return m, nil
		}
		return nil, fmt.Errorf("gke sandbox %s has no machine", name)
	}
	return w
}

// daemonStart picks the runtime's second /execute of a sandbox: the one
// that starts the daemon (the first moves it into place).
func (w *gkeWorld) daemonStart(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Path == "/execute" && w.executes.Add(1) == 2
}

// TestGKEWorkerKilledMidCommand is TestDaytonaWorkerKilledMidCommand on
// gke: the only worker is killed with SIGKILL while a command runs, in
// its first moments or in the Exec activity, and another starts, on
// another host. The command ran once, its output is whole and its result
// arrives.
func TestGKEWorkerKilledMidCommand(t *testing.T) {
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			w := newGKEWorld(t, "gke-killed-mid-command-token", "killed mid command secret")
			w1 := w.startWorker(t, "first worker", "gke-host-1", 0)
			run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
				workflows.RunInput{Provider: "gke", Argv: []string{"sh", "-c",
					"echo before; echo ran >> /workspace/log; " + waitGo + "; echo after; cat /workspace/log; exit 4"}})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the command to start", 2*time.Minute, func() bool {
				ids := w.sandboxes()
				if len(ids) != 1 {
					return false
				}
				m, err := w.machineOf(ids[0])
				return err == nil && machineHas(t, m, "/workspace/log")
			})
			if when == "activity" {
				testkit.Eventually(t, "the Exec activity on the first worker", time.Minute, func() bool {
					return w.activityOn(t, run.GetID(), "Exec", w1)
				})
			}
			w1.kill(t)
			w2 := w.startWorker(t, "second worker", "gke-host-2", 0)
			testkit.Eventually(t, "the Exec activity on the second worker", 2*time.Minute, func() bool {
				return w.activityOn(t, run.GetID(), "Exec", w2)
			})
			writeMachineFile(t, w.machine(t), "/workspace/go", "")

			var out workflows.RunOutput
			if err := run.Get(t.Context(), &out); err != nil {
				t.Fatal(err)
			}
			if out.ExitCode != 4 || string(out.Stdout.Inline) != "before\nafter\nran\n" || out.Stdout.Truncated {
				t.Errorf("after the worker was killed: exit %d, stdout %q (truncated %v), stderr %q; want exit 4, the whole output and one run",
					out.ExitCode, out.Stdout.Inline, out.Stdout.Truncated, out.Stderr.Inline)
			}
			if n := w.fake.Requests("create sandboxclaims"); n != 1 {
				t.Errorf("%d claims created, want 1", n)
			}
			testkit.Eventually(t, "the run's sandbox deleted", time.Minute, func() bool { return len(w.sandboxes()) == 0 })
		})
	}
}

// TestGKEWorkerKilledMidCreate is TestDaytonaWorkerKilledMidCreate on
// gke: the only worker is killed after the claim's Sandbox is Ready and
// the daemon uploaded, while the request that starts it is held, and the
// run that owns it is terminated: the claim is an orphan. A worker
// started after makes its reaper's pass at its start, which lists the
// claims by label and deletes it, and with it the Sandbox and its pod.
func TestGKEWorkerKilledMidCreate(t *testing.T) {
	w := newGKEWorld(t, "gke-killed-mid-create-token", "killed mid create secret")
	w.gate.setHold(w.daemonStart)
	w1 := w.startWorker(t, "first worker", "gke-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "gke", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the request that starts the daemon never came")
	}
	if ids := w.sandboxes(); len(ids) != 1 {
		t.Fatalf("the fake's sandboxes as the daemon is started: %v, want one", ids)
	}
	if !w.activityOn(t, run.GetID(), "Create", w1) {
		t.Fatal("the Create activity is not running on the first worker as its daemon is started")
	}
	w1.kill(t)
	if err := w.c.TerminateWorkflow(t.Context(), run.GetID(), "", "its worker died mid-create"); err != nil {
		t.Fatal(err)
	}
	w.gate.setHold(nil)

	w2 := w.startWorker(t, "second worker", "gke-host-2", time.Hour)
	var st workflows.ReaperStatus
	testkit.Eventually(t, "the reaper's first pass", 2*time.Minute, func() bool {
		v, err := w.c.QueryWorkflow(t.Context(), workflows.ReaperID("gke-host-2"), "", workflows.QueryReaper)
		if err != nil {
			return false
		}
		if err := v.Get(&st); err != nil {
			t.Fatal(err)
		}
		return st.Passes >= 1
	})
	if st.Passes != 1 || st.Error != "" || len(st.Last.Sandboxes) != 1 {
		t.Errorf("the reaper: %+v, want one pass that destroyed one sandbox", st)
	}
	testkit.Eventually(t, "the sandbox and its pod gone", time.Minute, func() bool { return len(w.sandboxes()) == 0 })
	if n := w.fake.Requests("create sandboxclaims"); n != 1 {
		t.Errorf("%d claims created, want 1", n)
	}
	_ = w2 // serves the reaper
}

// TestGKECreateRetriedAfterKill is TestDaytonaCreateRetriedAfterKill on
// gke: the only worker is killed as in TestGKEWorkerKilledMidCreate, and
// the run left be: another host's worker retries the Create, which finds
// the claim the first made by its name, starts its daemon, and goes on.
// One claim is made, the command's result arrives, and the run's end
// deletes the claim.
func TestGKECreateRetriedAfterKill(t *testing.T) {
	w := newGKEWorld(t, "gke-create-retried-token", "create retried secret")
	w.gate.setHold(w.daemonStart)
	w1 := w.startWorker(t, "first worker", "gke-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "gke", Argv: []string{"sh", "-c", "echo made once"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the request that starts the daemon never came")
	}
	w1.kill(t)
	w.gate.setHold(nil)
	w.startWorker(t, "second worker", "gke-host-2", 0)
	var out workflows.RunOutput
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 || string(out.Stdout.Inline) != "made once\n" {
		t.Errorf("the run after its Create was retried: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
	}
	if n := w.fake.Requests("create sandboxclaims"); n != 1 {
		t.Errorf("%d claims created, want 1", n)
	}
	testkit.Eventually(t, "the run's sandbox deleted", time.Minute, func() bool { return len(w.sandboxes()) == 0 })
}
