package daytona_test

import (
	"context"
	"strings"
	"testing"
	"time"

	sdk "github.com/daytonaio/daytona/libs/sdk-go/pkg/daytona"
	"github.com/daytonaio/daytona/libs/sdk-go/pkg/types"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/daytona"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/remote"
	"github.com/berth-dev/berth/provider/remote/remotetest"
)

// benchLatency is what the fake adds to every request, as a hosted
// service far from the worker would.
const benchLatency = 50 * time.Millisecond

// BenchmarkExec compares a command run through berth's daytona provider
// (package remote over this package's API: berth-sandboxd in the
// sandbox, reached through its preview URL) with the one call Daytona's
// own SDK makes for it (the toolbox's /process/execute), on one sandbox
// of a fake whose every request takes benchLatency more. The round
// trips each takes are counted by the fake: per exec, and, for berth,
// per create and per file write; berth-renew is the floor of a call to
// the daemon, one round trip that runs nothing.
func BenchmarkExec(b *testing.B) {
	ctx := context.Background()
	f, err := daytonafake.New(ctx, daytonafake.Options{Farm: farm, APIKey: testKey, Latency: benchLatency})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		f.Close()
		if v := f.Violations(); len(v) > 0 {
			b.Errorf("Daytona API violations:\n%s", strings.Join(v, "\n"))
		}
	}()
	api, err := daytona.New(daytona.Config{APIURL: f.APIURL(), APIKey: testKey})
	if err != nil {
		b.Fatal(err)
	}
	p := remote.New(api, remote.Config{DaemonPath: daemon, Secret: []byte("the daytona benchmark's secret"), User: daytona.DefaultUser})

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

	c, err := sdk.NewClientWithConfig(&types.DaytonaConfig{APIKey: testKey, APIUrl: f.APIURL()})
	if err != nil {
		b.Fatal(err)
	}
	box, err := c.Get(ctx, sb.(interface{ Machine() remote.Machine }).Machine().ID)
	if err != nil {
		b.Fatal(err)
	}

	remotetest.BenchDaemon(b, ctx, sb, f.AllRequests, createTrips, writeTrips)
	b.Run("direct", func(b *testing.B) {
		start := f.AllRequests()
		for b.Loop() {
			res, err := box.Process.ExecuteCommand(ctx, "true")
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("toolbox execute true: %+v, %v", res, err)
			}
		}
		b.ReportMetric(float64(f.AllRequests()-start)/float64(b.N), "trips/exec")
	})
}
