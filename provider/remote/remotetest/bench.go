package remotetest

import (
	"context"
	"testing"

	"github.com/berth-dev/berth/provider"
)

// BenchDaemon runs the hosted providers' benchmarks of berth's own path
// on sb: "berth", an exec of true, and "berth-renew", a lease renewal,
// each reporting the service's round trips per operation that trips
// counts, beside those of the create and the file write made before
// (createTrips, writeTrips). The provider's own call, the baseline,
// stays in its package.
func BenchDaemon(b *testing.B, ctx context.Context, sb provider.Sandbox, trips func() int, createTrips, writeTrips int) {
	b.Run("berth", func(b *testing.B) {
		start := trips()
		for b.Loop() {
			res, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec true: %+v, %v", res, err)
			}
		}
		b.ReportMetric(float64(trips()-start)/float64(b.N), "trips/exec")
		b.ReportMetric(float64(createTrips), "trips/create")
		b.ReportMetric(float64(writeTrips), "trips/write")
	})
	b.Run("berth-renew", func(b *testing.B) {
		l, ok := sb.(provider.Leaser)
		if !ok {
			b.Fatalf("%T renews no lease", sb)
		}
		start := trips()
		for b.Loop() {
			if err := l.Renew(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(trips()-start)/float64(b.N), "trips/renew")
	})
}
