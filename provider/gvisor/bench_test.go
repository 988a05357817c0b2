package gvisor

import (
	"os/exec"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/linux"
)

// BenchmarkCreateExec measures a whole one-shot sandbox: create, run
// /bin/true, get the result, destroy; and runsc do true, gVisor's own
// one-shot, as the baseline.
//
//   - berth: a sandbox created when the pool has a container ready, as
//     when sandboxes are not made back to back (the wait is not timed);
//   - berth-cold: no pool, every container started on demand;
//   - runsc-do: runsc do true, with the same platform and no network.
func BenchmarkCreateExec(b *testing.B) {
	oneShot := func(b *testing.B, p *Provider, warm bool) {
		var wait func()
		if warm {
			wait = func() { waitWarm(b, p) }
		}
		sandboxtest.OneShot(b, p, wait, true)
	}
	b.Run("berth", func(b *testing.B) { oneShot(b, newTestProvider(b, Config{}), true) })
	b.Run("berth-cold", func(b *testing.B) { oneShot(b, newTestProvider(b, Config{Pool: -1}), false) })
	b.Run("runsc-do", func(b *testing.B) {
		p := newTestProvider(b, Config{Pool: -1})
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			cmd := exec.Command(p.cfg.Runsc, "--root", b.TempDir(), "--platform", p.cfg.Platform, "--network", "none", "do", "/bin/true")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("runsc do: %v: %s", err, out)
			}
			samples = append(samples, time.Since(start))
		}
		sandboxtest.ReportMedian(b, samples)
	})
}

// waitWarm waits until the pool has a container ready, none is
// starting, and nothing of the last iteration is being removed.
func waitWarm(b *testing.B, p *Provider) {
	p.cleanups.Wait()
	sandboxtest.WaitWarm(b, p.pool.Counts, p.pool.Refill, 30*time.Second, "container")
}

// BenchmarkExec measures one command (/bin/true) in a running sandbox,
// of this provider and of the linux provider.
func BenchmarkExec(b *testing.B) {
	bench := func(b *testing.B, p provider.Provider) {
		ctx := b.Context()
		sb, err := p.Create(ctx, provider.Spec{})
		if err != nil {
			b.Fatal(err)
		}
		defer sb.Destroy(ctx)
		sandboxtest.Exec(b, sb, []string{"/bin/true"})
	}
	b.Run("gvisor", func(b *testing.B) { bench(b, newTestProvider(b, Config{Pool: -1})) })
	b.Run("linux", func(b *testing.B) {
		p, err := linux.New(linux.Config{StateDir: sandboxtest.SearchableTempDir(b, "berth-bench"), Pool: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		bench(b, p)
	})
}
