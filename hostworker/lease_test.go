package hostworker

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// TestWorkerRenewsLeases: while the host renews, a sandbox with a lease
// far shorter than the test keeps running its busy loop; once the host
// stops renewing, the loop stops within the lease and a few seconds.
// CPU is read from the host's /proc.
func TestWorkerRenewsLeases(t *testing.T) {
	const lease = time.Second
	p := berthtest.Provider(t)
	sb, err := p.Create(t.Context(), provider.Spec{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	mark := "renew-" + sb.ID()
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: `nohup sh -c ': ` + mark + `; while :; do :; done' > /dev/null 2>&1 &`})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the loop: %+v, %v", res, err)
	}
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(20 * time.Millisecond) {
		if pid = findHostProcess(mark); pid == 0 && time.Now().After(deadline) {
			t.Fatal("the loop is not on the host's /proc")
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		renewLeases(ctx, map[string]provider.Provider{"linux": p}, nil, slog.New(slog.DiscardHandler))
	}()
	// Three leases: each second the loop runs.
	for i := range 3 {
		if used := cpuOver(pid, time.Second); used == 0 {
			t.Fatalf("second %d of renewals: the loop used no CPU: the lease stopped it", i+1)
		}
	}
	cancel()
	<-done
	start := time.Now()
	for cpuOver(pid, 500*time.Millisecond) > 0 {
		if time.Since(start) > lease+5*time.Second {
			t.Fatalf("with renewals over, the loop still runs %v later", time.Since(start))
		}
	}
	t.Logf("stopped %v after the last renewal", time.Since(start).Round(100*time.Millisecond))
}

// findHostProcess finds the process whose command line holds mark.
func findHostProcess(mark string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline"); strings.Contains(string(b), mark) {
			return pid
		}
	}
	return 0
}

// cpuOver is the CPU time pid uses over d, in clock ticks of 10 ms.
func cpuOver(pid int, d time.Duration) time.Duration {
	read := func() uint64 {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			return 0
		}
		u, _ := strconv.ParseUint(f[11], 10, 64)
		sys, _ := strconv.ParseUint(f[12], 10, 64)
		return u + sys
	}
	before := read()
	time.Sleep(d)
	return time.Duration(read()-before) * 10 * time.Millisecond
}
