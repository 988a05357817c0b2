package hostworker_test

import (
	"bytes"
	"context"
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
	w.creates = func() int { return w.fake.Requests("StartCodeInterpreterSession") }
	w.holdCreate = w.holdAtGate(startTask)
	w.midCreate = "the call that starts the daemon"
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

// TestAgentCoreSandboxOutlivesSessions: AgentCore ends a session at its
// timeout, whatever berth does (here 20 s, the max-lifetime setting):
// a standalone sandbox that lives on is moved to a new session before
// each end, its workspace with it, and its commands never see a loss.
// Every session but the last has ended, by berth's hand.
func TestAgentCoreSandboxOutlivesSessions(t *testing.T) {
	w := newAgentCoreWorld(t, "outlives sessions secret")
	// A move takes a checkpoint, a creation and a restore: at a load of
	// 25 on 2 cores a creation alone took 6 s, more than the 5 s margin
	// of a 20 s session. 40 s leaves 10 s.
	w.settings["max-lifetime"] = "40s"
	w.startWorker(t, "worker", "agentcore-host-1", 0)
	run, err := w.c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
		workflows.SandboxInput{Provider: "agentcore", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer w.c.CancelWorkflow(context.WithoutCancel(t.Context()), run.GetID(), "")
	first := sandboxStatus(t, w.c, run.GetID())
	if first.MovesAt.IsZero() {
		t.Fatalf("the sandbox's status says no move: %+v", first.Status)
	}
	execIn(t, w.c, run.GetID(), workflows.ExecRequest{Shell: "mkdir d && echo kept > d/f && ln -s d/f link"})
	// Moved at 30 s of each 40 s session: two moves within 70 s.
	testkit.Eventually(t, "two moves", 150*time.Second, func() bool {
		return sandboxStatus(t, w.c, run.GetID()).Generation >= first.Generation+2
	})
	out := execIn(t, w.c, run.GetID(), workflows.ExecRequest{Shell: "cat link"})
	if string(out.Stdout.Inline) != "kept\n" || out.ExitCode != 0 {
		t.Errorf("after two moves: exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout.Inline, out.Stderr.Inline)
	}
	if live := w.fake.Sessions(); len(live) != 1 {
		t.Errorf("live sessions after two moves: %v, want the sandbox's one", live)
	}
}
