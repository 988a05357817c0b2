package docker

import (
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
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

// BenchmarkCreateExec measures create-to-first-result: creating a
// sandbox and getting the result of /bin/true in it. Destroying it is
// not timed. The baseline is the engine doing the least it can for the
// same result with the same image: docker run --rm IMAGE true, whose
// time includes the container's removal.
//
//   - berth: a sandbox created when the pool has a warm container ready,
//     as when sandboxes are not made back to back (the wait is not
//     timed);
//   - berth-cold: no pool: Docker creates and starts a container, and
//     the provider formats and mounts its workspace meanwhile;
//   - docker-run: the docker CLI.
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
			samples = append(samples, time.Since(start))
			b.StopTimer()
			if err := sb.Destroy(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		reportMedian(b, samples)
	}
	b.Run("berth", func(b *testing.B) { oneShot(b, newTestProvider(b, Config{}), true) })
	b.Run("berth-cold", func(b *testing.B) { oneShot(b, newTestProvider(b, Config{Pool: -1}), false) })
	b.Run("docker-run", func(b *testing.B) {
		needDocker(b)
		var samples []time.Duration
		for b.Loop() {
			start := time.Now()
			if out, err := exec.Command("docker", "run", "--rm", "--network", "none", testImage, "true").CombinedOutput(); err != nil {
				b.Fatalf("docker run: %v: %s", err, out)
			}
			samples = append(samples, time.Since(start))
		}
		reportMedian(b, samples)
	})
}

// waitWarm waits until the pool has a container ready and none starting.
func waitWarm(b *testing.B, p *Provider) {
	p.pool.fill(p.cfg.Image) // fills the pool the first time; a no-op when full
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

// BenchmarkExec measures one command in a running sandbox: the figure
// to hold against the linux provider's BenchmarkExec.
func BenchmarkExec(b *testing.B) {
	p := newTestProvider(b, Config{})
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
