package hostworker_test

import (
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// The crash tests of the hosted providers: each runs on every provider
// in remoteProviders, against its fake, with every worker a process of
// its own that the test kills with SIGKILL.

// remoteProviders are the hosted providers' worlds, by provider name:
// each starts a world whose workers are given the API key key and the
// daemons' secret secret.
var remoteProviders = []struct {
	name     string
	newWorld func(t *testing.T, key, secret string) *remoteWorld
}{
	{"e2b", func(t *testing.T, key, secret string) *remoteWorld { return newE2BWorld(t, key, secret).remoteWorld }},
	{"daytona", func(t *testing.T, key, secret string) *remoteWorld {
		return newDaytonaWorld(t, key, secret).remoteWorld
	}},
	{"modal", func(t *testing.T, key, secret string) *remoteWorld {
		return newModalWorld(t, "ak-"+key, "as-"+key, secret).remoteWorld
	}},
	{"gke", func(t *testing.T, key, secret string) *remoteWorld { return newGKEWorld(t, key, secret).remoteWorld }},
	// AgentCore's credentials are the fake's own (AWS's shape); key is
	// not used.
	{"agentcore", func(t *testing.T, _, secret string) *remoteWorld { return newAgentCoreWorld(t, secret).remoteWorld }},
}

// eachRemote runs test on every hosted provider, in parallel.
func eachRemote(t *testing.T, test func(t *testing.T, name string, w *remoteWorld)) {
	for _, p := range remoteProviders {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			// A key of the service's shape would be no more real: the
			// fakes take any key they are given.
			w := p.newWorld(t, p.name+"_key_of_"+t.Name(), "the secret of "+t.Name())
			test(t, p.name, w)
		})
	}
}

// waitGo makes a command wait until the test creates /workspace/go,
// so that it runs for as long as the test needs.
const waitGo = "while [ ! -e /workspace/go ]; do sleep 0.05; done"

// TestRemoteWorkerKilledMidCommand kills the only worker with SIGKILL
// while a command runs in a hosted sandbox, and starts another, on
// another host (a hosted sandbox is bound to no host): the command ran
// once, its output is whole and its result arrives. The command appends
// a line to a file and prints the file at its end: a second run would
// print two. The worker dies in the command's first moments (a local
// activity, whose workflow task the new worker retries) or in the Exec
// activity it was handed to (retried once its heartbeat times out);
// either retry attaches to the command the daemon runs.
func TestRemoteWorkerKilledMidCommand(t *testing.T) {
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			eachRemote(t, func(t *testing.T, name string, w *remoteWorld) {
				w1 := w.startWorker(t, "first worker", name+"-host-1", 0)
				run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
					workflows.RunInput{Provider: name, Argv: []string{"sh", "-c",
						"echo before; echo ran >> /workspace/log; " + waitGo + "; echo after; cat /workspace/log; exit 4"}})
				if err != nil {
					t.Fatal(err)
				}
				testkit.Eventually(t, "the command to start", 2*time.Minute, func() bool {
					ids := w.sandboxes()
					if len(ids) != 1 {
						return false
					}
					m, err := w.machineOf(ids[0]) // none while the sandbox is being made
					return err == nil && machineHas(t, m, "/workspace/log")
				})
				if when == "activity" {
					testkit.Eventually(t, "the Exec activity on the first worker", time.Minute, func() bool {
						return w.activityOn(t, run.GetID(), "Exec", w1)
					})
				}
				w1.kill(t)
				w2 := w.startWorker(t, "second worker", name+"-host-2", 0)
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
				if n := w.creates(); n != 1 {
					t.Errorf("%d sandboxes created, want 1", n)
				}
				testkit.Eventually(t, "the run's sandbox destroyed", time.Minute, func() bool { return len(w.sandboxes()) == 0 })
			})
		})
	}
}

// holdMidCreate starts a run of argv on the provider with the gate
// holding the Create activity's request between the service's making
// the machine and the activity's end (w.midCreate), and returns once
// that request is held and its sandbox made.
func holdMidCreate(t *testing.T, name string, w *remoteWorld, w1 *remoteWorker, held <-chan struct{}, argv ...string) client.WorkflowRun {
	t.Helper()
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: name, Argv: argv})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%s never came", w.midCreate)
	}
	if ids := w.sandboxes(); len(ids) != 1 {
		t.Fatalf("the fake's sandboxes at %s: %v, want one", w.midCreate, ids)
	}
	if !w.activityOn(t, run.GetID(), "Create", w1) {
		t.Fatalf("the Create activity is not running on the first worker at %s", w.midCreate)
	}
	return run
}

// TestRemoteWorkerKilledMidCreate kills the only worker after the
// service has made a sandbox and before the Create activity has
// completed (the gate holds a request the activity makes between the
// two), then terminates the run that owns it, so that nothing of
// berth's will destroy it: the sandbox is an orphan. A worker started
// after makes its reaper's pass at its start, which lists the
// provider's sandboxes by label and destroys it: the fake holds no
// sandbox.
func TestRemoteWorkerKilledMidCreate(t *testing.T) {
	eachRemote(t, func(t *testing.T, name string, w *remoteWorld) {
		held, release := w.holdCreate(t)
		defer release()
		w1 := w.startWorker(t, "first worker", name+"-host-1", 0)
		run := holdMidCreate(t, name, w, w1, held, "true")
		w1.kill(t)
		if err := w.c.TerminateWorkflow(t.Context(), run.GetID(), "", "its worker died mid-create"); err != nil {
			t.Fatal(err)
		}
		release()

		w2 := w.startWorker(t, "second worker", name+"-host-2", time.Hour)
		var st workflows.ReaperStatus
		testkit.Eventually(t, "the reaper's first pass", 2*time.Minute, func() bool {
			v, err := w.c.QueryWorkflow(t.Context(), workflows.ReaperID(name+"-host-2"), "", workflows.QueryReaper)
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
		if ids := w.sandboxes(); len(ids) != 0 {
			t.Errorf("the fake's sandboxes after the reaper's pass: %v, want none", ids)
		}
		if n := w.creates(); n != 1 {
			t.Errorf("%d sandboxes created, want 1", n)
		}
		_ = w2 // serves the reaper
	})
}

// TestRemoteCreateRetriedAfterKill kills the only worker, as
// TestRemoteWorkerKilledMidCreate does, but leaves the run be: another
// host's worker retries the Create, which finds the sandbox the first
// made by its name, finds its daemon answering or starts it, and goes
// on. One sandbox is made, the command's result arrives, and the run's
// end destroys the sandbox.
func TestRemoteCreateRetriedAfterKill(t *testing.T) {
	eachRemote(t, func(t *testing.T, name string, w *remoteWorld) {
		held, release := w.holdCreate(t)
		defer release()
		w1 := w.startWorker(t, "first worker", name+"-host-1", 0)
		run := holdMidCreate(t, name, w, w1, held, "sh", "-c", "echo made once")
		w1.kill(t)
		release()
		w.startWorker(t, "second worker", name+"-host-2", 0)
		var out workflows.RunOutput
		if err := run.Get(t.Context(), &out); err != nil {
			t.Fatal(err)
		}
		if out.ExitCode != 0 || string(out.Stdout.Inline) != "made once\n" {
			t.Errorf("the run after its Create was retried: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
		}
		if n := w.creates(); n != 1 {
			t.Errorf("%d sandboxes created, want 1", n)
		}
		testkit.Eventually(t, "the run's sandbox destroyed", time.Minute, func() bool { return len(w.sandboxes()) == 0 })
	})
}
