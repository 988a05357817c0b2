package linux

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

// BenchmarkCreateExec measures a whole one-shot sandbox: create, run
// /bin/true, get the result, destroy; and bubblewrap doing the same with
// equivalent isolation, as the baseline.
//
//   - berth: a sandbox created when the pool has a warm daemon ready, as
//     when sandboxes are not made back to back (the wait is not timed);
//   - berth-burst: sandboxes back to back, as fast as possible, so the
//     pool runs dry and creation waits for daemons to start;
//   - berth-cold: no pool, every daemon started on demand.
func BenchmarkCreateExec(b *testing.B) {
	b.Run("berth", func(b *testing.B) {
		p := benchProvider(b, 0)
		sandboxtest.OneShot(b, p, func() { waitWarm(b, p) }, true)
	})
	b.Run("berth-burst", func(b *testing.B) { sandboxtest.OneShot(b, benchProvider(b, 0), nil, true) })
	b.Run("berth-cold", func(b *testing.B) {
		sandboxtest.OneShot(b, benchProvider(b, -1), nil, true)
	})
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := exec.LookPath("bwrap")
		if err != nil {
			b.Fatal("bubblewrap is the baseline; install it (Debian package bubblewrap)")
		}
		ws := b.TempDir()
		args := []string{
			"--unshare-user", "--uid", "1000", "--gid", "1000",
			"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
			"--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
		}
		for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
			if target, err := os.Readlink("/" + l); err == nil {
				args = append(args, "--symlink", target, "/"+l)
			}
		}
		args = append(args, "--bind", ws, "/workspace", "--tmpfs", "/tmp", "--proc", "/proc",
			"--dev", "/dev", "--new-session", "--die-with-parent", "--cap-drop", "ALL",
			"--chdir", "/workspace", "/bin/true")
		sandboxtest.Baseline(b, func() *exec.Cmd { return exec.Command(bwrap, args...) })
	})
}

// BenchmarkExec measures one command in a running sandbox, and, as the
// baseline, the host's own fork and exec of the same program from Go
// (os/exec, output collected as Exec collects it).
func BenchmarkExec(b *testing.B) {
	b.Run("berth", func(b *testing.B) {
		sb := sandboxtest.Create(b, benchProvider(b, 0), provider.Spec{})
		sandboxtest.Exec(b, sb, []string{"/bin/true"})
	})
	b.Run("host", func(b *testing.B) {
		sandboxtest.Baseline(b, func() *exec.Cmd { return exec.Command("/bin/true") })
	})
	b.Run("health", func(b *testing.B) {
		p := benchProvider(b, 0)
		ctx := b.Context()
		sb := sandboxtest.Create(b, p, provider.Spec{})
		c := sb.(*sandbox).client
		for b.Loop() {
			if _, err := c.Health(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchProvider is a provider whose sandboxes run berth-sandboxd (see
// benchDaemon), with a pool of pool warm daemons (Config.Pool).
func benchProvider(b *testing.B, pool int) *Provider {
	p, err := New(Config{StateDir: shortTempDir(b), DaemonPath: benchDaemon(b), Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { destroyAll(b, p) })
	return p
}

// waitWarm waits until the pool has a daemon ready, and nothing of the
// last iteration is still running in the background.
func waitWarm(b *testing.B, p *Provider) {
	p.cleanups.Wait()
	sandboxtest.WaitWarm(b, p.pool.Counts, p.pool.Refill, 5*time.Second, "daemon")
}

// BenchmarkResume measures bringing a natively paused (frozen) sandbox
// back: Resume alone, and Resume then a command's result (/bin/true), as
// the next operation on an idle sandbox sees it. Pausing is not timed.
func BenchmarkResume(b *testing.B) {
	for _, withExec := range []bool{false, true} {
		name := "resume"
		if withExec {
			name = "resume-exec"
		}
		b.Run(name, func(b *testing.B) {
			ctx := b.Context()
			p := benchProvider(b, 0)
			sb := sandboxtest.Create(b, p, provider.Spec{})
			// Something running, as in a real workspace.
			if _, err := sb.Exec(ctx, provider.ExecRequest{Shell: "sleep 1000 > /dev/null 2>&1 &"}); err != nil {
				b.Fatal(err)
			}
			pauser := sb.(provider.Pauser)
			var samples []time.Duration
			for b.Loop() {
				b.StopTimer()
				if err := pauser.Pause(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := pauser.Resume(ctx); err != nil {
					b.Fatal(err)
				}
				if withExec {
					res, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"/bin/true"}})
					if err != nil || res.ExitCode != 0 {
						b.Fatalf("exec: %+v, %v", res, err)
					}
				}
				samples = append(samples, time.Since(start))
			}
			sandboxtest.ReportMedian(b, samples)
		})
	}
}
