package docker

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
	"github.com/berth-dev/berth/provider/linux"
)

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
	b.Run("berth", func(b *testing.B) {
		p := newTestProvider(b, Config{})
		sandboxtest.OneShot(b, p, func() { waitWarm(b, p) }, false)
	})
	b.Run("berth-cold", func(b *testing.B) { sandboxtest.OneShot(b, newTestProvider(b, Config{Pool: -1}), nil, false) })
	b.Run("docker-run", func(b *testing.B) {
		needDocker(b)
		sandboxtest.Baseline(b, func() *exec.Cmd {
			return exec.Command("docker", "run", "--rm", "--network", "none", testImage, "true")
		})
	})
}

// waitWarm waits until the pool has a container ready and none starting.
func waitWarm(b *testing.B, p *Provider) {
	counts := func() (int, int) {
		p.pool.mu.Lock()
		defer p.pool.mu.Unlock()
		return len(p.pool.ready), p.pool.filling
	}
	sandboxtest.WaitWarm(b, counts, func() { p.pool.fill(p.cfg.Image) }, 30*time.Second, "container")
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
			dir := sandboxtest.SearchableTempDir(b, "berth-bench-linux-")
			p, err := linux.New(linux.Config{StateDir: dir, DaemonPath: testEnv.daemon})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close() })
			return p
		}},
	}
	for _, pr := range providers {
		for _, argv := range [][]string{{"/bin/true"}, {"/workspace/static"}} {
			b.Run(pr.name+strings.ReplaceAll(argv[0], "/", "-"), func(b *testing.B) {
				p := pr.open(b)
				ctx := b.Context()
				sb := sandboxtest.Create(b, p, provider.Spec{})
				if err := sb.WriteFile(ctx, "static", bytes.NewReader(static), 0o755); err != nil {
					b.Fatal(err)
				}
				sandboxtest.Exec(b, sb, argv)
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
