package hostworker_test

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// routed is where a sandbox of a provider landed, and what a command
// in it said.
type routed struct {
	Provider, Queue, Stdout string
}

// routeBoth creates a docker sandbox and a linux one from one workflow,
// which runs on one host: one of its sandboxes is of a provider that
// host does not serve.
func routeBoth(ctx workflow.Context) ([]routed, error) {
	var out []routed
	for _, p := range []string{"docker", "linux"} {
		sbx, err := sandbox.New(ctx, sandbox.Provider{Name: p})
		if err != nil {
			return out, err
		}
		res, err := sbx.Exec(ctx, "echo ran")
		out = append(out, routed{Provider: p, Queue: sbx.Ref().Queue, Stdout: res.Stdout})
		if serr := sbx.Stop(ctx); err == nil {
			err = serr
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// TestRouting: two hosts on one server, one serving only linux and one
// only docker. Each sandbox is created on the host that serves its
// provider, whichever host runs its workflow; one of a provider no host
// serves fails at once, as bad input naming those served; the Providers
// workflow (berth providers) asks both hosts, and shows one that has
// stopped as unreachable.
func TestRouting(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	data := shortDataDir(t)
	daemon := buildDaemon(t)
	docker, err := provider.Open(ctx, "docker", provider.Config{
		"state-dir": filepath.Join(data, "docker"), "daemon": daemon, "image": "berth-test:1", "pool": "-1",
	})
	if err != nil {
		t.Fatalf("open the docker provider (needs the engine and berth-test:1, provider/docker/testdata/build-image.sh): %v", err)
	}
	t.Cleanup(func() { docker.(io.Closer).Close() })
	bucket := berthtest.Bucket(t)
	hosts := map[string]*hostworker.Worker{}
	for queue, p := range map[string]provider.Provider{"berth@lin": berthtest.Provider(t), "berth@dock": docker} {
		w, err := hostworker.StartWorker(c, hostworker.Options{
			Providers: map[string]provider.Provider{p.Name(): p}, Outputs: bucket,
			Queue: sandbox.DefaultQueue, HostQueue: queue,
			Workflows: []any{routeBoth},
		})
		if err != nil {
			t.Fatal(err)
		}
		hosts[queue] = w
		t.Cleanup(w.Stop)
	}
	// Creation asks the server who polls for a provider: both hosts
	// must have polled once.
	for _, p := range []string{"docker", "linux"} {
		q := activities.ProviderQueue(sandbox.DefaultQueue, p)
		testkit.Eventually(t, "a worker polling "+q, 30*time.Second, func() bool {
			resp, err := c.DescribeTaskQueue(ctx, q, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
			return err == nil && len(resp.GetPollers()) > 0
		})
	}

	t.Run("each provider on its host", func(t *testing.T) {
		// Several workflows, to run on both hosts.
		var runs []client.WorkflowRun
		for range 4 {
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, routeBoth)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run)
		}
		want := map[string]string{"docker": "berth@dock", "linux": "berth@lin"}
		for _, run := range runs {
			var got []routed
			if err := run.Get(ctx, &got); err != nil {
				t.Fatalf("workflow %s: %s", run.GetID(), temporalerr.OneLine(err))
			}
			for _, r := range got {
				if r.Queue != want[r.Provider] || r.Stdout != "ran\n" {
					t.Errorf("a %s sandbox: on %s, ran %q; want on %s, ran", r.Provider, r.Queue, r.Stdout, want[r.Provider])
				}
			}
		}
	})

	t.Run("a provider no host serves", func(t *testing.T) {
		for _, p := range []string{"gvisor", "nosuch"} {
			start := time.Now()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Run,
				workflows.RunInput{Provider: p, Argv: []string{"true"}})
			if err != nil {
				t.Fatal(err)
			}
			err = run.Get(ctx, nil)
			line := temporalerr.OneLine(err)
			if temporalerr.KindOf(err) != errdefs.BadInput || strings.Count(line, "\n") > 0 ||
				!strings.Contains(line, `provider "`+p+`"`) || !strings.Contains(line, "served: docker, linux") {
				t.Errorf("a run on %s: %q; want bad input naming it and the providers served", p, line)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("a run on %s failed after %v; want at once", p, took)
			}
		}
	})

	t.Run("providers of every host", func(t *testing.T) {
		got := hostProviders(t, c)
		if len(got) != 2 || !serves(got[0], "berth@dock", "docker") || !serves(got[1], "berth@lin", "linux") {
			t.Fatalf("providers: %+v; want berth@dock serving docker and berth@lin linux", got)
		}
		hosts["berth@dock"].Stop()
		// The server still lists the stopped host's worker: it is asked,
		// and does not answer.
		got = hostProviders(t, c)
		if len(got) != 2 || !got[0].Unreachable || got[0].Host != "berth@dock" || got[0].Error == "" || !serves(got[1], "berth@lin", "linux") {
			t.Fatalf("providers with berth@dock stopped: %+v; want it unreachable, berth@lin serving linux", got)
		}
	})
}

func hostProviders(t *testing.T, c client.Client) []sandbox.HostProviders {
	t.Helper()
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue},
		workflows.Providers, workflows.ProvidersInput{})
	if err != nil {
		t.Fatal(err)
	}
	var got []sandbox.HostProviders
	if err := run.Get(t.Context(), &got); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	return got
}

// serves says whether h is host, answering that it serves exactly name.
func serves(h sandbox.HostProviders, host, name string) bool {
	return h.Host == host && !h.Unreachable && len(h.Providers) == 1 &&
		h.Providers[0].Name == name && h.Providers[0].Available && h.Providers[0].Host == host
}
