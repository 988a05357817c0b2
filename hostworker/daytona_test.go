package hostworker_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// daytonaWorld is a remoteWorld serving daytona, over a fake Daytona
// whose API is behind the gate (the toolbox and the previews, at the
// URLs the API answers, are not).
type daytonaWorld struct {
	*remoteWorld
	fake *daytonafake.Server
}

// newDaytonaWorld starts the server, the fake and the gate for the test;
// the workers' key is key, their daemons' secret secret.
func newDaytonaWorld(t *testing.T, key, secret string) *daytonaWorld {
	t.Helper()
	w := &daytonaWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = daytonafake.New(t.Context(), daytonafake.Options{Farm: w.farm, APIKey: key, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake removes its sandboxes' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests or answers against Daytona's spec:\n%s", strings.Join(v, "\n"))
		}
	})
	w.gate = newGate(t, w.fake.URL())
	w.provider = "daytona"
	w.settings = provider.Config{"api-url": w.gate.URL() + "/api"}
	w.env = []string{"DAYTONA_API_KEY=" + key, "BERTH_DAYTONA_SECRET=" + secret}
	w.sandboxes = w.fake.Sandboxes
	w.machineOf = func(id string) (*remotefake.Machine, error) {
		if m := w.fake.Machine(id); m != nil {
			return m, nil
		}
		return nil, fmt.Errorf("daytona sandbox %s has no machine", id)
	}
	return w
}

// previewURL picks the API's request for a preview URL: the Create
// activity asks it once the daemon is started, to reach it.
func previewURL(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/sandbox/") && strings.HasSuffix(r.URL.Path, "/preview-url")
}

// TestDaytonaWorkerKilledMidCommand is TestE2BWorkerKilledMidCommand on
// daytona: the only worker is killed with SIGKILL while a command runs,
// in its first moments or in the Exec activity, and another starts, on
// another host. The command ran once, its output is whole and its result
// arrives.
func TestDaytonaWorkerKilledMidCommand(t *testing.T) {
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			w := newDaytonaWorld(t, "dtn_killed_mid_command_key", "killed mid command secret")
			w1 := w.startWorker(t, "first worker", "daytona-host-1", 0)
			run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
				workflows.RunInput{Provider: "daytona", Argv: []string{"sh", "-c",
					"echo before; echo ran >> /workspace/log; " + waitGo + "; echo after; cat /workspace/log; exit 4"}})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the command to start", 2*time.Minute, func() bool {
				// A sandbox still creating has no machine yet.
				ids := w.fake.Sandboxes()
				if len(ids) != 1 || w.fake.Machine(ids[0]) == nil {
					return false
				}
				return machineHas(t, w.machine(t), "/workspace/log")
			})
			if when == "activity" {
				testkit.Eventually(t, "the Exec activity on the first worker", time.Minute, func() bool {
					return w.activityOn(t, run.GetID(), "Exec", w1)
				})
			}
			w1.kill(t)
			w2 := w.startWorker(t, "second worker", "daytona-host-2", 0)
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
			if n := w.fake.Requests("POST /sandbox"); n != 1 {
				t.Errorf("%d sandboxes created, want 1", n)
			}
			testkit.Eventually(t, "the run's sandbox deleted", time.Minute, func() bool { return len(w.fake.Sandboxes()) == 0 })
		})
	}
}

// TestDaytonaWorkerKilledMidCreate is TestE2BWorkerKilledMidCreate on
// daytona: the only worker is killed after Daytona has made the sandbox
// and started its daemon, and before the Create activity has completed
// (the gate holds the request for the daemon's preview URL), and the run
// that owns it is terminated: the sandbox is an orphan. A worker started
// after makes its reaper's pass at its start, which lists daytona's
// sandboxes by label and deletes it: the fake holds no sandbox.
func TestDaytonaWorkerKilledMidCreate(t *testing.T) {
	w := newDaytonaWorld(t, "dtn_killed_mid_create_key", "killed mid create secret")
	w.gate.setHold(previewURL)
	w1 := w.startWorker(t, "first worker", "daytona-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "daytona", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the request for the daemon's preview URL never came")
	}
	if ids := w.fake.Sandboxes(); len(ids) != 1 {
		t.Fatalf("the fake's sandboxes as the daemon's preview URL is asked: %v, want one", ids)
	}
	if !w.activityOn(t, run.GetID(), "Create", w1) {
		t.Fatal("the Create activity is not running on the first worker as its daemon's preview URL is asked")
	}
	w1.kill(t)
	if err := w.c.TerminateWorkflow(t.Context(), run.GetID(), "", "its worker died mid-create"); err != nil {
		t.Fatal(err)
	}
	w.gate.setHold(nil)

	w2 := w.startWorker(t, "second worker", "daytona-host-2", time.Hour)
	var st workflows.ReaperStatus
	testkit.Eventually(t, "the reaper's first pass", 2*time.Minute, func() bool {
		v, err := w.c.QueryWorkflow(t.Context(), workflows.ReaperID("daytona-host-2"), "", workflows.QueryReaper)
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
	if ids := w.fake.Sandboxes(); len(ids) != 0 {
		t.Errorf("the fake's sandboxes after the reaper's pass: %v, want none", ids)
	}
	if n := w.fake.Requests("POST /sandbox"); n != 1 {
		t.Errorf("%d sandboxes created, want 1", n)
	}
	_ = w2 // serves the reaper
}

// TestDaytonaCreateRetriedAfterKill is TestE2BCreateRetriedAfterKill on
// daytona: the only worker is killed as in
// TestDaytonaWorkerKilledMidCreate, and the run left be: another host's
// worker retries the Create, which finds the sandbox the first made by
// its name, finds its daemon answering or starts it, and goes on. One
// sandbox is made, the command's result arrives, and the run's end
// deletes the sandbox.
func TestDaytonaCreateRetriedAfterKill(t *testing.T) {
	w := newDaytonaWorld(t, "dtn_create_retried_key", "create retried secret")
	w.gate.setHold(previewURL)
	w1 := w.startWorker(t, "first worker", "daytona-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "daytona", Argv: []string{"sh", "-c", "echo made once"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the request for the daemon's preview URL never came")
	}
	w1.kill(t)
	w.gate.setHold(nil)
	w.startWorker(t, "second worker", "daytona-host-2", 0)
	var out workflows.RunOutput
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 || string(out.Stdout.Inline) != "made once\n" {
		t.Errorf("the run after its Create was retried: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
	}
	if n := w.fake.Requests("POST /sandbox"); n != 1 {
		t.Errorf("%d sandboxes created, want 1", n)
	}
	testkit.Eventually(t, "the run's sandbox deleted", time.Minute, func() bool { return len(w.fake.Sandboxes()) == 0 })
}
