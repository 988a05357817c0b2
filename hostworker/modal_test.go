package hostworker_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// modalWorld is a remoteWorld serving modal, over a fake Modal. Modal's
// API is gRPC, which the gate does not carry: a create is held by a
// fault of the fake's instead.
type modalWorld struct {
	*remoteWorld
	fake *modalfake.Server
}

// newModalWorld starts the server and the fake for the test; the
// workers' token is id and secret, their daemons' secret daemonSecret.
func newModalWorld(t *testing.T, id, secret, daemonSecret string) *modalWorld {
	t.Helper()
	w := &modalWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = modalfake.New(t.Context(), modalfake.Options{Farm: w.farm, TokenID: id, TokenSecret: secret, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	// Before the farm closes: the fake ends its sandboxes' machines.
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("calls against Modal's protocol:\n%s", strings.Join(v, "\n"))
		}
	})
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, w.fake.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	w.provider = "modal"
	w.settings = provider.Config{"server-url": w.fake.URL(), "tunnel-ca-file": ca}
	w.env = []string{"MODAL_TOKEN_ID=" + id, "MODAL_TOKEN_SECRET=" + secret, "BERTH_MODAL_SECRET=" + daemonSecret,
		"MODAL_CONFIG_PATH=" + filepath.Join(dir, "no-modal.toml")}
	w.sandboxes = w.fake.IDs
	w.machineOf = w.farm.Machine
	return w
}

// TestModalWorkerKilledMidCommand is TestE2BWorkerKilledMidCommand on
// modal: the only worker is killed with SIGKILL while a command runs,
// in its first moments or in the Exec activity, and another starts, on
// another host. The command ran once, its output is whole and its result
// arrives.
func TestModalWorkerKilledMidCommand(t *testing.T) {
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			w := newModalWorld(t, "ak-killed-mid-command", "as-killed-mid-command", "killed mid command secret")
			w1 := w.startWorker(t, "first worker", "modal-host-1", 0)
			run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
				workflows.RunInput{Provider: "modal", Argv: []string{"sh", "-c",
					"echo before; echo ran >> /workspace/log; " + waitGo + "; echo after; cat /workspace/log; exit 4"}})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the command to start", 2*time.Minute, func() bool {
				if len(w.fake.IDs()) != 1 {
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
			w2 := w.startWorker(t, "second worker", "modal-host-2", 0)
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
			if n := w.fake.Requests("SandboxCreateV2"); n != 1 {
				t.Errorf("%d sandboxes created, want 1", n)
			}
			testkit.Eventually(t, "the run's sandbox ended", time.Minute, func() bool { return len(w.fake.IDs()) == 0 })
		})
	}
}

// TestModalWorkerKilledMidCreate is TestE2BWorkerKilledMidCreate on
// modal: the only worker is killed after Modal has made the sandbox and
// started its daemon, and before the Create activity has completed (the
// fake holds the wait for the exec that started the daemon), and the run
// that owns it is terminated: the sandbox is an orphan. A worker
// started after makes its reaper's pass at its start, which lists
// modal's sandboxes by tags and terminates it: the fake holds no
// sandbox.
func TestModalWorkerKilledMidCreate(t *testing.T) {
	w := newModalWorld(t, "ak-killed-mid-create", "as-killed-mid-create", "killed mid create secret")
	release, held := make(chan struct{}), make(chan struct{}, 1)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	// The first wait is the upload's, the second the start's.
	w.fake.Inject(modalfake.Fault{Method: "TaskExecWait", Skip: 1, Hold: release, Held: held})
	w1 := w.startWorker(t, "first worker", "modal-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "modal", Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the wait for the daemon's start never came")
	}
	if ids := w.fake.IDs(); len(ids) != 1 {
		t.Fatalf("the fake's sandboxes as the daemon starts: %v, want one", ids)
	}
	if !w.activityOn(t, run.GetID(), "Create", w1) {
		t.Fatal("the Create activity is not running on the first worker as its daemon starts")
	}
	w1.kill(t)
	if err := w.c.TerminateWorkflow(t.Context(), run.GetID(), "", "its worker died mid-create"); err != nil {
		t.Fatal(err)
	}
	close(release)

	w2 := w.startWorker(t, "second worker", "modal-host-2", time.Hour)
	var st workflows.ReaperStatus
	testkit.Eventually(t, "the reaper's first pass", 2*time.Minute, func() bool {
		v, err := w.c.QueryWorkflow(t.Context(), workflows.ReaperID("modal-host-2"), "", workflows.QueryReaper)
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
	if ids := w.fake.IDs(); len(ids) != 0 {
		t.Errorf("the fake's sandboxes after the reaper's pass: %v, want none", ids)
	}
	if n := w.fake.Requests("SandboxCreateV2"); n != 1 {
		t.Errorf("%d sandboxes created, want 1", n)
	}
	_ = w2 // serves the reaper
}

// TestModalCreateRetriedAfterKill is TestE2BCreateRetriedAfterKill on
// modal: the only worker is killed as in TestModalWorkerKilledMidCreate,
// and the run left be: another host's worker retries the Create, which
// finds the sandbox the first made by its name, finds its daemon
// answering or starts it, and goes on. One sandbox is made, the
// command's result arrives, and the run's end terminates the sandbox.
func TestModalCreateRetriedAfterKill(t *testing.T) {
	w := newModalWorld(t, "ak-create-retried", "as-create-retried", "create retried secret")
	release, held := make(chan struct{}), make(chan struct{}, 1)
	w.fake.Inject(modalfake.Fault{Method: "TaskExecWait", Skip: 1, Hold: release, Held: held})
	w1 := w.startWorker(t, "first worker", "modal-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "modal", Argv: []string{"sh", "-c", "echo made once"}})
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(2 * time.Minute):
		close(release)
		t.Fatal("the wait for the daemon's start never came")
	}
	w1.kill(t)
	close(release)
	w.startWorker(t, "second worker", "modal-host-2", 0)
	var out workflows.RunOutput
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 || string(out.Stdout.Inline) != "made once\n" {
		t.Errorf("the run after its Create was retried: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
	}
	if n := w.fake.Requests("SandboxCreateV2"); n != 1 {
		t.Errorf("%d sandboxes created, want 1", n)
	}
	testkit.Eventually(t, "the run's sandbox ended", time.Minute, func() bool { return len(w.fake.IDs()) == 0 })
}
