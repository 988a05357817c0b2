package docker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// BenchmarkExec measures one command in a running sandbox, against the
// linux provider's in the same run: /bin/true, whose image the engine's
// storage driver serves (on this machine fuse-overlayfs, a user-space
// file system), and a static program in the workspace, an ext4 image in
// both providers, which measures the providers alone.
func BenchmarkExec(b *testing.B) {
	needDocker(b)
	static := buildStatic(b)
	providers := []struct {
		name string
		open func(b *testing.B) provider.Provider
	}{
		{"docker", func(b *testing.B) provider.Provider { return newTestProvider(b, Config{}) }},
		{"linux", func(b *testing.B) provider.Provider {
			dir, err := os.MkdirTemp("", "berth-bench-linux-")
			if err != nil {
				b.Fatal(err)
			}
			// The linux provider's daemons run under ids of their own.
			if err := os.Chmod(dir, 0o711); err != nil {
				b.Fatal(err)
			}
			p, err := linux.New(linux.Config{StateDir: dir, DaemonPath: testEnv.daemon})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close(); os.RemoveAll(dir) })
			return p
		}},
	}
	for _, pr := range providers {
		for _, argv := range [][]string{{"/bin/true"}, {"/workspace/static"}} {
			b.Run(pr.name+strings.ReplaceAll(argv[0], "/", "-"), func(b *testing.B) {
				p := pr.open(b)
				ctx := b.Context()
				sb, err := p.Create(ctx, provider.Spec{})
				if err != nil {
					b.Fatal(err)
				}
				defer sb.Destroy(context.Background())
				if err := sb.WriteFile(ctx, "static", bytes.NewReader(static), 0o755); err != nil {
					b.Fatal(err)
				}
				var samples, inSandbox []time.Duration
				for b.Loop() {
					start := time.Now()
					res, err := sb.Exec(ctx, provider.ExecRequest{Argv: argv})
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
			})
		}
	}
}

// buildStatic builds a static program that does nothing.
func buildStatic(b *testing.B) []byte {
	dir := b.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(dir, "static")
	build := exec.Command("go", "build", "-o", out, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build a static program: %v: %s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		b.Fatal(err)
	}
	return data
}
