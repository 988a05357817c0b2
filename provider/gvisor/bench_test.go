package gvisor

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
)

// reportMedian adds the median of the samples to a benchmark's output,
// beside the mean that ns/op gives.
func reportMedian(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "median-ms")
}

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
		ctx := b.Context()
		var samples []time.Duration
		for b.Loop() {
			if warm {
				b.StopTimer()
				waitWarm(b, p)
				b.StartTimer()
			}
			start := time.Now()
			sb, err := p.Create(ctx, provider.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			res, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"/bin/true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", res, err)
			}
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
		}
		reportMedian(b, samples)
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
		reportMedian(b, samples)
	})
}

// waitWarm waits until the pool has a container ready, none is
// starting, and nothing of the last iteration is being removed.
func waitWarm(b *testing.B, p *Provider) {
	p.cleanups.Wait()
	p.pool.refill() // fills the pool the first time; a no-op when full
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.pool.mu.Lock()
		ready, filling := len(p.pool.ready), p.pool.filling
		p.pool.mu.Unlock()
		if ready > 0 && filling == 0 {
			return
		}
	}
	b.Fatal("no warm container after 30s")
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
		var samples, inSandbox []time.Duration
		for b.Loop() {
			start := time.Now()
			res, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"/bin/true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec: %+v, %v", res, err)
			}
			samples = append(samples, time.Since(start))
			inSandbox = append(inSandbox, res.Duration)
		}
		reportMedian(b, samples)
		// How much of it is the process itself, from fork to exit.
		slices.Sort(inSandbox)
		b.ReportMetric(float64(inSandbox[len(inSandbox)/2].Microseconds())/1000, "process-ms")
	}
	b.Run("gvisor", func(b *testing.B) { bench(b, newTestProvider(b, Config{Pool: -1})) })
	b.Run("linux", func(b *testing.B) {
		dir, err := os.MkdirTemp("", "berth-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o711); err != nil {
			b.Fatal(err)
		}
		p, err := linux.New(linux.Config{StateDir: dir, Pool: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		bench(b, p)
	})
}
