package hostworker_test

import (
	"net/http"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// waitGo makes a command wait until the test creates /workspace/go,
// so that it runs for as long as the test needs.
const waitGo = "while [ ! -e /workspace/go ]; do sleep 0.05; done"

// TestE2BWorkerKilledMidCommand kills the only worker with SIGKILL while
// a command runs in an e2b sandbox, and starts another, on another host
// (an e2b sandbox is bound to no host): the command ran once, its output
// is whole and its result arrives. The command appends a line to a file
// and prints the file at its end: a second run would print two. The
// worker dies in the command's first moments (a local activity, whose
// workflow task the new worker retries) or in the Exec activity it was
// handed to (retried once its heartbeat times out); either retry
// attaches to the command the daemon runs.
func TestE2BWorkerKilledMidCommand(t *testing.T) {
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			w := newE2BWorld(t, "e2b_killed_mid_command_key", "killed mid command secret")
			w1 := w.startWorker(t, "first worker", "e2b-host-1", 0)
			run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
				workflows.RunInput{Provider: "e2b", Argv: []string{"sh", "-c",
					"echo before; echo ran >> /workspace/log; " + waitGo + "; echo after; cat /workspace/log; exit 4"}})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the command to start", 2*time.Minute, func() bool {
				ids := w.fake.Sandboxes()
				return len(ids) == 1 && machineHas(t, w.machine(t), "/workspace/log")
			})
			if when == "activity" {
				testkit.Eventually(t, "the Exec activity on the first worker", time.Minute, func() bool {
					return w.activityOn(t, run.GetID(), "Exec", w1)
				})
			}
			w1.kill(t)
			w2 := w.startWorker(t, "second worker", "e2b-host-2", 0)
			testkit.Eventually(t, "the Exec activity on the second worker", 2*time.Minute, func() bool {
				return w.activityOn(t, run.GetID(), "Exec", w2)
			})
			m := w.machine(t)
			writeMachineFile(t, m, "/workspace/go", "")

			var out workflows.RunOutput
			if err := run.Get(t.Context(), &out); err != nil {
				t.Fatal(err)
			}
			if out.ExitCode != 4 || string(out.Stdout.Inline) != "before\nafter\nran\n" || out.Stdout.Truncated {
				t.Errorf("after the worker was killed: exit %d, stdout %q (truncated %v), stderr %q; want exit 4, the whole output and one run",
					out.ExitCode, out.Stdout.Inline, out.Stdout.Truncated, out.Stderr.Inline)
			}
			if n := w.fake.Requests("POST /sandboxes"); n != 1 {
				t.Errorf("%d sandboxes created, want 1", n)
			}
			testkit.Eventually(t, "the run's sandbox destroyed", time.Minute, func() bool { return len(w.fake.Sandboxes()) == 0 })
		})
	}
}

// TestE2BWorkerKilledMidCreate kills the only worker after E2B has made
// a sandbox and before the Create activity has completed (the gate
// holds the daemon's upload into it), then terminates the run that
// owns it, so that nothing of berth's will destroy it: the sandbox is an
// orphan. A worker started after makes its reaper's pass at its start,
// which lists e2b's sandboxes by label and destroys it: the fake holds
// no sandbox.
func TestE2BWorkerKilledMidCreate(t *testing.T) {
	w := newE2BWorld(t, "e2b_killed_mid_create_key", "killed mid create secret")
	w.gate.setHold(func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == "/files" })
	w1 := w.startWorker(t, "first worker", "e2b-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "e2b", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the daemon's upload never came")
	}
	if ids := w.fake.Sandboxes(); len(ids) != 1 {
		t.Fatalf("the fake's sandboxes as the daemon is uploaded: %v, want one", ids)
	}
	if !w.activityOn(t, run.GetID(), "Create", w1) {
		t.Fatal("the Create activity is not running on the first worker as its daemon is uploaded")
	}
	w1.kill(t)
	if err := w.c.TerminateWorkflow(t.Context(), run.GetID(), "", "its worker died mid-create"); err != nil {
		t.Fatal(err)
	}
	w.gate.setHold(nil)

	w2 := w.startWorker(t, "second worker", "e2b-host-2", time.Hour)
	var st workflows.ReaperStatus
	testkit.Eventually(t, "the reaper's first pass", 2*time.Minute, func() bool {
		v, err := w.c.QueryWorkflow(t.Context(), workflows.ReaperID("e2b-host-2"), "", workflows.QueryReaper)
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
	if n := w.fake.Requests("POST /sandboxes"); n != 1 {
		t.Errorf("%d sandboxes created, want 1", n)
	}
	_ = w2 // serves the reaper
}

// TestE2BCreateRetriedAfterKill kills the only worker, as
// TestE2BWorkerKilledMidCreate does, after E2B has made the sandbox and
// before Create has completed, but leaves the run be: another host's
// worker retries the Create, which finds the sandbox the first made by
// its name, starts its daemon and goes on. One sandbox is made, the
// command's result arrives, and the run's end destroys the sandbox.
func TestE2BCreateRetriedAfterKill(t *testing.T) {
	w := newE2BWorld(t, "e2b_create_retried_key", "create retried secret")
	w.gate.setHold(func(r *http.Request) bool { return r.Method == http.MethodPost && r.URL.Path == "/files" })
	w1 := w.startWorker(t, "first worker", "e2b-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "e2b", Argv: []string{"sh", "-c", "echo made once"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the daemon's upload never came")
	}
	w1.kill(t)
	w.gate.setHold(nil)
	w.startWorker(t, "second worker", "e2b-host-2", 0)
	var out workflows.RunOutput
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 || string(out.Stdout.Inline) != "made once\n" {
		t.Errorf("the run after its Create was retried: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
	}
	if n := w.fake.Requests("POST /sandboxes"); n != 1 {
		t.Errorf("%d sandboxes created, want 1", n)
	}
	testkit.Eventually(t, "the run's sandbox destroyed", time.Minute, func() bool { return len(w.fake.Sandboxes()) == 0 })
}
