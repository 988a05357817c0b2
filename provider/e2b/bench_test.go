package e2b_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b"
	"github.com/berth-dev/berth/provider/e2b/e2bapi"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// benchLatency is what the fake adds to every request, as a hosted
// service far from the worker would.
const benchLatency = 50 * time.Millisecond

// countingTransport counts the round trips it carries.
type countingTransport struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// BenchmarkExec compares a command run through berth's e2b provider
// (package remote over this package's API: berth-sandboxd in the
// sandbox, reached through E2B's port proxy) with the one call E2B's own
// client makes for it (envd's process.Start, read to its end event), on
// one sandbox of a fake whose every request takes benchLatency more.
// The round trips each takes are counted at the HTTP client: per exec,
// and, for berth, per create and per file write; berth-renew is the
// floor of a call to the daemon, one round trip that runs nothing.
func BenchmarkExec(b *testing.B) {
	ctx := context.Background()
	daemon := filepath.Join(b.TempDir(), "berth-sandboxd")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", daemon, "github.com/berth-dev/berth/cmd/berth-sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build berth-sandboxd: %v\n%s", err, out)
	}
	f, err := e2bfake.New(ctx, e2bfake.Options{Farm: farm, APIKey: testKey, Latency: benchLatency})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			b.Errorf("spec violations:\n%s", strings.Join(v, "\n"))
		}
	}()
	rt := &countingTransport{rt: http.DefaultTransport.(*http.Transport).Clone()}
	hc := &http.Client{Transport: rt}
	api, err := e2b.New(e2b.Config{APIURL: f.URL(), SandboxURL: f.SandboxURL(), APIKey: testKey, HTTPClient: hc, MaxLifetime: 24 * time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the e2b benchmark's secret"), Transport: rt})

	start := rt.n.Load()
	sb, err := p.Create(ctx, provider.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	createTrips := rt.n.Load() - start
	defer sb.Destroy(ctx)
	start = rt.n.Load()
	if err := sb.WriteFile(ctx, "f", strings.NewReader("some text"), 0); err != nil {
		b.Fatal(err)
	}
	writeTrips := rt.n.Load() - start

	c, err := e2bapi.New(e2bapi.Options{APIURL: f.URL(), SandboxURL: f.SandboxURL(), APIKey: testKey, HTTPClient: hc})
	if err != nil {
		b.Fatal(err)
	}
	det, err := c.GetSandbox(ctx, sb.(interface{ Machine() remote.Machine }).Machine().ID)
	if err != nil {
		b.Fatal(err)
	}
	ref := e2bapi.SandboxRef{ID: det.SandboxID, EnvdAccessToken: det.EnvdAccessToken}
	no := false

	remotetest.BenchDaemon(b, ctx, sb, func() int { return int(rt.n.Load()) }, int(createTrips), int(writeTrips))
	b.Run("direct", func(b *testing.B) {
		start := rt.n.Load()
		for b.Loop() {
			res, err := c.Run(ctx, ref, e2bapi.StartRequest{Process: e2bapi.ProcessConfig{Cmd: "true"}, Stdin: &no},
				e2bapi.StartOptions{User: "user"}, 1<<10)
			if err != nil || res.End.ExitCode != 0 || !res.End.Exited {
				b.Fatalf("envd start true: %+v, %v", res, err)
			}
		}
		b.ReportMetric(float64(rt.n.Load()-start)/float64(b.N), "trips/exec")
	})
}
