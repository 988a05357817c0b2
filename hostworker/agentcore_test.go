package hostworker_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/agentcore"
	"github.com/berth-dev/berth/provider/agentcore/agentcorefake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// agentcoreWorld is a remoteWorld serving agentcore, over a fake
// AgentCore behind the gate: every call of the service, the relay's
// included, passes it.
type agentcoreWorld struct {
	*remoteWorld
	fake *agentcorefake.Server
}

// The fake's credentials, the workers' through their environment.
const (
	agentcoreKeyID  = "AKIAHOSTWORKERTEST01"
	agentcoreSecret = "hostworker/agentcore/secret"
)

// newAgentCoreWorld starts the server, the fake and the gate for the
// test; the workers' daemons' secret is secret.
func newAgentCoreWorld(t *testing.T, secret string) *agentcoreWorld {
	t.Helper()
	w := &agentcoreWorld{remoteWorld: newRemoteWorld(t)}
	var err error
	if w.fake, err = agentcorefake.New(t.Context(), agentcorefake.Options{Farm: w.farm, AccessKeyID: agentcoreKeyID,
		SecretAccessKey: agentcoreSecret, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.fake.Close()
		if v := w.fake.Violations(); len(v) > 0 {
			t.Errorf("requests against AgentCore's API:\n%s", strings.Join(v, "\n"))
		}
	})
	w.gate = newSignedGate(t, w.fake.URL())
	w.provider = "agentcore"
	w.settings = provider.Config{"endpoint-url": w.gate.URL()}
	w.env = []string{"AWS_ACCESS_KEY_ID=" + agentcoreKeyID, "AWS_SECRET_ACCESS_KEY=" + agentcoreSecret,
		"AWS_SESSION_TOKEN=", "AWS_REGION=us-west-2", "AWS_PROFILE=", "AWS_CONFIG_FILE=/nonexistent",
		"AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true", "BERTH_AGENTCORE_SECRET=" + secret}
	w.sandboxes = w.fake.Sessions
	w.machineOf = func(id string) (*remotefake.Machine, error) {
		if m := w.fake.Machine(id); m != nil {
			return m, nil
		}
		return nil, fmt.Errorf("agentcore session %s has no machine", id)
	}
	return w
}

// newSignedGate is the gate in front of a fake whose requests are
// signed: the Host they were signed for goes on to the fake.
func newSignedGate(t *testing.T, target string) *gate {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{held: make(chan struct{}, 16), release: make(chan struct{}), seen: map[string]bool{}}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(u)
		pr.Out.Host = pr.In.Host
	}, FlushInterval: -1}
	g.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		hold := g.hold != nil && g.hold(r)
		g.mu.Unlock()
		if hold {
			g.held <- struct{}{}
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

// startTask picks the call that starts the daemon: the Create activity
// makes it once the session is made and the daemon uploaded. The body
// is read and put back.
func startTask(r *http.Request) bool {
	if !strings.HasSuffix(r.URL.Path, "/tools/invoke") {
		return false
	}
	b, err := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	return err == nil && bytes.Contains(b, []byte(`"startCommandExecution"`))
}

// TestAgentCoreWorkerKilledMidCommand is TestE2BWorkerKilledMidCommand
// on agentcore: the only worker is killed with SIGKILL while a command
// runs, in its first moments or in the Exec activity, and another
// starts, on another host. The command ran once, its output is whole
// and its result arrives, through the relay's calls of the second
// worker.
func TestAgentCoreWorkerKilledMidCommand(t *testing.T) {
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			w := newAgentCoreWorld(t, "killed mid command secret")
			w1 := w.startWorker(t, "first worker", "agentcore-host-1", 0)
			run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
				workflows.RunInput{Provider: "agentcore", Argv: []string{"sh", "-c",
					"echo before; echo ran >> /workspace/log; " + waitGo + "; echo after; cat /workspace/log; exit 4"}})
			if err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the command to start", 2*time.Minute, func() bool {
				ids := w.fake.Sessions()
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
			w2 := w.startWorker(t, "second worker", "agentcore-host-2", 0)
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
			if n := w.fake.Requests("StartCodeInterpreterSession"); n != 1 {
				t.Errorf("%d sessions started, want 1", n)
			}
			testkit.Eventually(t, "the run's session stopped", time.Minute, func() bool { return len(w.fake.Sessions()) == 0 })
		})
	}
}

// TestAgentCoreCreateRetriedAfterKill is TestE2BCreateRetriedAfterKill
// on agentcore: the only worker is killed as its Create activity starts
// the daemon (the gate holds that call), and the run left be: another
// host's worker retries the Create, which finds the session by name,
// starts its daemon, and goes on. One session is made, the command's
// result arrives, and the run's end stops the session.
func TestAgentCoreCreateRetriedAfterKill(t *testing.T) {
	w := newAgentCoreWorld(t, "create retried secret")
	w.gate.setHold(startTask)
	w1 := w.startWorker(t, "first worker", "agentcore-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
		workflows.RunInput{Provider: "agentcore", Argv: []string{"sh", "-c", "echo made once"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.gate.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the call that starts the daemon never came")
	}
	w1.kill(t)
	w.gate.setHold(nil)
	w.startWorker(t, "second worker", "agentcore-host-2", 0)
	var out workflows.RunOutput
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 0 || string(out.Stdout.Inline) != "made once\n" {
		t.Errorf("the run after its Create was retried: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
	}
	if n := w.fake.Requests("StartCodeInterpreterSession"); n != 1 {
		t.Errorf("%d sessions started, want 1", n)
	}
	testkit.Eventually(t, "the run's session stopped", time.Minute, func() bool { return len(w.fake.Sessions()) == 0 })
}
