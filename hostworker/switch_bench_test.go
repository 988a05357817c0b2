package hostworker_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider"
	_ "github.com/berth-dev/berth/provider/docker" // the providers switched between
	_ "github.com/berth-dev/berth/provider/gvisor"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// BenchmarkSwitch moves a standalone sandbox with a 100 MiB workspace
// (100 files of random bytes: nothing to deduplicate or compress) round
// the providers this host serves, linux → docker → gvisor → linux, and
// reports the median of each move: checkpoint, create on the other
// provider, restore, destroy the old one. Needs the Docker engine with
// the image berth-test:1 (provider/docker/testdata/build-image.sh) and
// runsc.
func BenchmarkSwitch(b *testing.B) {
	ctx := b.Context()
	c := server(b)
	data, err := os.MkdirTemp("", "bsw")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(data) })
	daemon := buildDaemon(b)
	h, err := hostworker.StartHost(ctx, c, hostworker.HostConfig{
		DataDir: data, Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Providers: []string{"linux", "docker", "gvisor"},
		ProviderConfig: map[string]provider.Config{
			"docker": {"daemon": daemon, "image": "berth-test:1"},
			"gvisor": {"daemon": daemon},
		},
	})
	if err != nil {
		b.Skipf("needs linux, docker and gvisor on this host: %v", err)
	}
	defer h.Close()
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "switching", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in)
	if err != nil {
		b.Fatal(err)
	}
	// Before the host closes: the sandbox's workflow destroys the sandbox
	// it ends with, and waits for the destruction a switch left behind.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = c.CancelWorkflow(ctx, run.GetID(), "")
		_ = run.Get(ctx, nil)
	}()
	sandboxStatus(b, c, run.GetID())
	execIn(b, c, run.GetID(), workflows.ExecRequest{Shell: "for i in $(seq 100); do head -c 1048576 /dev/urandom > f$i; done"})
	order := []string{"docker", "gvisor", "linux"}
	took := map[string][]time.Duration{}
	from := "linux"
	b.ResetTimer()
	for i := range b.N {
		to := order[i%len(order)]
		start := time.Now()
		if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: to}); err != nil {
			b.Fatal(temporalerr.OneLine(err))
		}
		took[from+"→"+to] = append(took[from+"→"+to], time.Since(start))
		from = to
	}
	b.StopTimer()
	if out := execIn(b, c, run.GetID(), workflows.ExecRequest{Shell: "ls f* | wc -l; cat f* | wc -c"}); string(out.Stdout.Inline) != "100\n104857600\n" {
		b.Errorf("the workspace after the moves: %q", out.Stdout.Inline)
	}
	for pair, d := range took {
		b.ReportMetric(median(d)/1000, fmt.Sprintf("s/%s", pair))
	}
}
