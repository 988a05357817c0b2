// Package sandboxtest holds what the providers' own tests and benchmarks
// share: making a sandbox that goes when the test ends, running a shell
// script in it, and the measures the benchmarks take. The conformance
// suite every provider passes is provider/providertest.
package sandboxtest

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// Create makes a sandbox of p, destroyed when the test ends.
func Create(t testing.TB, p provider.Provider, spec provider.Spec) provider.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// Not t.Context(): it is cancelled before cleanups run.
	t.Cleanup(func() { sb.Destroy(context.Background()) })
	return sb
}

// DestroyAll destroys every sandbox p lists, as a test's cleanup does
// with what it left; a sandbox that will not go fails the test.
func DestroyAll(t testing.TB, p provider.Provider) {
	ctx := context.Background()
	infos, err := p.List(ctx, nil)
	if err != nil {
		t.Errorf("list: %v", err)
	}
	for _, info := range infos {
		if sb, err := p.Get(ctx, info.ID); err == nil {
			if err := sb.Destroy(ctx); err != nil {
				t.Errorf("destroy %s: %v", info.ID, err)
			}
		}
	}
}

// Sh runs a shell script in sb, failing the test unless it exits 0, and
// returns what it printed.
func Sh(t testing.TB, sb provider.Sandbox, script string) string {
	t.Helper()
	var out, errOut strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: script, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q: exit %d, %v; stderr: %s", script, res.ExitCode, err, errOut.String())
	}
	return out.String()
}

// ReportMedian adds the median of the samples to a benchmark's output,
// beside the mean that ns/op gives.
func ReportMedian(b *testing.B, samples []time.Duration) {
	reportMedian(b, samples, "median-ms")
}

func reportMedian(b *testing.B, samples []time.Duration, unit string) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, unit)
}

// OneShot measures whole one-shot sandboxes of p: create, run /bin/true,
// get the result, and destroy, which is timed when timeDestroy is set.
// Before each, when wait is not nil, it calls wait untimed (to let a
// pool fill).
func OneShot(b *testing.B, p provider.Provider, wait func(), timeDestroy bool) {
	ctx := b.Context()
	var samples []time.Duration
	for b.Loop() {
		if wait != nil {
			b.StopTimer()
			wait()
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
		if !timeDestroy {
			samples = append(samples, time.Since(start))
			b.StopTimer()
		}
		if err := sb.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
		if timeDestroy {
			samples = append(samples, time.Since(start))
		} else {
			b.StartTimer()
		}
	}
	ReportMedian(b, samples)
}

// WaitWarm waits, at most within, until a pool whose counts says how
// many it has ready and starting has one ready and none starting. It
// calls refill first: that fills the pool the first time, and does
// nothing when it is full. what names what the pool keeps.
func WaitWarm(b *testing.B, counts func() (ready, filling int), refill func(), within time.Duration, what string) {
	refill()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if ready, filling := counts(); ready > 0 && filling == 0 {
			return
		}
	}
	b.Fatalf("no warm %s after %v", what, within)
}

// Exec measures one command, argv, in sb: the time to its result, and
// the median time of the process itself, from fork to exit.
func Exec(b *testing.B, sb provider.Sandbox, argv []string) {
	ctx := b.Context()
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
	ReportMedian(b, samples)
	reportMedian(b, inSandbox, "process-ms")
}

// VmRSS reads the resident memory, in bytes, of a process from the text
// of its /proc/PID/status.
func VmRSS(t testing.TB, status string) int64 {
	t.Helper()
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in the process's status: %s", status)
	return 0
}

// SmapsRollup reads /proc/PID/smaps_rollup of a process: its fields
// (Rss, Pss, Anonymous, ...) in KiB.
func SmapsRollup(t testing.TB, pid int) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			m[strings.TrimSuffix(f[0], ":")] = kb
		}
	}
	return m
}

// SearchableTempDir makes a temporary directory that others may search,
// as the linux provider's daemons, under ids of their own, must. It goes
// when the test ends. (t.TempDir is below a directory others may not
// search.)
func SearchableTempDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Baseline measures a command of the host, made afresh by cmd for each
// run: what a provider's figures are set beside.
func Baseline(b *testing.B, cmd func() *exec.Cmd) {
	var samples []time.Duration
	for b.Loop() {
		start := time.Now()
		c := cmd()
		if out, err := c.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v: %s", c.Args[0], err, out)
		}
		samples = append(samples, time.Since(start))
	}
	ReportMedian(b, samples)
}

// CgroupProcs lists the pids in a cgroup's cgroup.procs file; none when
// the cgroup is gone.
func CgroupProcs(file string) []int {
	b, _ := os.ReadFile(file)
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}
