package modal_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	sdk "github.com/modal-labs/modal-client/go"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// benchLatency is what the fake adds to every call and every request
// through a tunnel, as a hosted service far from the worker would.
const benchLatency = 50 * time.Millisecond

// BenchmarkExec compares a command run through berth's modal provider
// (package remote over this package's API: berth-sandboxd in the
// sandbox, reached through its tunnel) with the SDK's own exec of it
// (Sandbox.Exec, then reading its output and waiting: the calls of the
// command router), on one sandbox of a fake whose every call takes
// benchLatency more. The round trips each takes are counted by the
// fake: per exec, and, for berth, per create and per file write;
// berth-renew is the floor of a call to the daemon, one round trip that
// runs nothing.
func BenchmarkExec(b *testing.B) {
	ctx := context.Background()
	f, err := modalfake.New(ctx, modalfake.Options{Farm: farm, TokenID: testTokenID, TokenSecret: testTokenSecret, Latency: benchLatency})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			b.Errorf("Modal protocol violations:\n%s", strings.Join(v, "\n"))
		}
	}()
	api, err := modal.New(modal.Config{ServerURL: f.URL(), TunnelCA: f.CAFile(), TokenID: testTokenID, TokenSecret: testTokenSecret})
	if err != nil {
		b.Fatal(err)
	}
	defer api.Close()
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the modal benchmark's secret"), User: modal.DefaultUser})

	start := f.AllRequests()
	sb, err := p.Create(ctx, provider.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	createTrips := f.AllRequests() - start
	b.Logf("a create's calls: %v", f.Counts())
	defer sb.Destroy(ctx)
	start = f.AllRequests()
	if err := sb.WriteFile(ctx, "f", strings.NewReader("some text"), 0); err != nil {
		b.Fatal(err)
	}
	writeTrips := f.AllRequests() - start

	b.Setenv("MODAL_SERVER_URL", f.URL())
	c, err := sdk.NewClientWithOptions(&sdk.ClientParams{TokenID: testTokenID, TokenSecret: testTokenSecret})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	box, err := c.Sandboxes.FromID(ctx, sb.(interface{ Machine() remote.Machine }).Machine().ID, nil)
	if err != nil {
		b.Fatal(err)
	}
	direct := func() {
		cp, err := box.Exec(ctx, []string{"true"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, cp.Stdout)
		_, _ = io.Copy(io.Discard, cp.Stderr)
		if code, err := cp.Wait(ctx, nil); err != nil || code != 0 {
			b.Fatalf("SDK exec true: %d, %v", code, err)
		}
	}
	direct() // the SDK's command router connection, made once

	remotetest.BenchDaemon(b, ctx, sb, f.AllRequests, createTrips, writeTrips)
	b.Run("direct", func(b *testing.B) {
		start := f.AllRequests()
		for b.Loop() {
			direct()
		}
		b.ReportMetric(float64(f.AllRequests()-start)/float64(b.N), "trips/exec")
	})
}
