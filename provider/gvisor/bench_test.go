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
	b.Run("berth", func(b *testing.B) {
		p := newTestProvider(b, Config{})
		sandboxtest.OneShot(b, p, func() { waitWarm(b, p) }, true)
	})
	b.Run("berth-cold", func(b *testing.B) { sandboxtest.OneShot(b, newTestProvider(b, Config{Pool: -1}), nil, true) })
	b.Run("runsc-do", func(b *testing.B) {
		p := newTestProvider(b, Config{Pool: -1})
		sandboxtest.Baseline(b, func() *exec.Cmd {
			return exec.Command(p.cfg.Runsc, "--root", b.TempDir(), "--platform", p.cfg.Platform, "--network", "none", "do", "/bin/true")
		})
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
		sb := sandboxtest.Create(b, p, provider.Spec{})
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
