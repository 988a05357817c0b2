package gke_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	agentsclient "sigs.k8s.io/agent-sandbox/clients/go/sandbox"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/gke"
	"github.com/berth-dev/berth/provider/gke/gkefake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// benchLatency is what the fake adds to every request, and to every
// message through a port forward, as a cluster far from the worker
// would.
const benchLatency = 50 * time.Millisecond

// BenchmarkExec compares a command run through berth's gke provider
// (berth-sandboxd in the sandbox's pod, reached through the API server's
// port forward) with the one call the runtime's own client makes for it
// (/execute through the sandbox router), on one sandbox of a fake whose
// every request takes benchLatency more. The fake counts the round
// trips: per exec, and, for berth, per create and per file write;
// berth-renew is the floor of a call to the daemon.
func BenchmarkExec(b *testing.B) {
	ctx := context.Background()
	f, err := gkefake.New(ctx, gkefake.Options{Farm: farm, Token: testToken, Latency: benchLatency})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			b.Errorf("Kubernetes API violations:\n%s", strings.Join(v, "\n"))
		}
	}()
	if err := f.AddTemplate("default", testTemplate); err != nil {
		b.Fatal(err)
	}
	kc := filepath.Join(b.TempDir(), "kubeconfig")
	if err := f.Kubeconfig(kc, "fake"); err != nil {
		b.Fatal(err)
	}
	api, err := gke.New(gke.Config{Kubeconfig: kc, Template: testTemplate, RouterURL: f.RouterURL()})
	if err != nil {
		b.Fatal(err)
	}
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the gke benchmark's secret")})

	start := f.AllRequests()
	sb, err := p.Create(ctx, provider.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	createTrips := f.AllRequests() - start
	defer sb.Destroy(ctx)
	start = f.AllRequests()
	if err := sb.WriteFile(ctx, "f", strings.NewReader("some text"), 0); err != nil {
		b.Fatal(err)
	}
	writeTrips := f.AllRequests() - start

	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		b.Fatal(err)
	}
	rt, err := agentsclient.NewClient(ctx, agentsclient.Options{APIURL: f.RouterURL(), RestConfig: rc, Quiet: true})
	if err != nil {
		b.Fatal(err)
	}
	name := sb.(interface{ Machine() remote.Machine }).Machine().Name
	h, err := rt.GetSandbox(ctx, name, "default")
	if err != nil {
		b.Fatal(err)
	}
	defer h.Disconnect(ctx)

	remotetest.BenchDaemon(b, ctx, sb, f.AllRequests, createTrips, writeTrips)
	b.Run("direct", func(b *testing.B) {
		start := f.AllRequests()
		for b.Loop() {
			res, err := h.Run(ctx, "true")
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("runtime execute true: %+v, %v", res, err)
			}
		}
		b.ReportMetric(float64(f.AllRequests()-start)/float64(b.N), "trips/exec")
	})
}
