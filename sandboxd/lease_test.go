package sandboxd

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// TestLease holds the daemon to its lease: with no contact for the
// lease, every process it started stops (no CPU), forking ones too; any
// request continues them; a Pause holds whatever contact comes, until
// Resume.
func TestLease(t *testing.T) {
	const length = time.Second
	s, sock := serveConfig(t, Config{})
	c := NewClient(UnixDialer(sock))
	t.Cleanup(c.Close)
	s.SetLease(length)

	// A busy loop, and a loop that forks without end; their requests
	// end (the callers go away) while they run on.
	// Each is cancelled only once its own shell runs: the first one's
	// process would satisfy a wait for "any child", and a request
	// cancelled before it is sent starts nothing.
	for i, cmd := range []string{"while :; do :; done", "while :; do /bin/true; done"} {
		ctx, cancel := context.WithCancel(t.Context())
		go c.Exec(ctx, provider.ExecRequest{Shell: cmd})
		waitFor(t, 10*time.Second, "the command runs", func() bool { return cpu(t) > 0 && len(children(t)) > i })
		cancel()
	}
	waitFor(t, 10*time.Second, "the commands' requests end", func() bool { return len(children(t)) >= 2 })

	start := time.Now()
	waitStill(t, length+5*time.Second, "with no contact for the lease, the sandbox's processes stop")
	t.Logf("stopped %v after the last contact", time.Since(start).Round(10*time.Millisecond))
	// Held: the sweep finds nothing that escaped.
	if used := usedOver(t, 1500*time.Millisecond); used > 0 {
		t.Errorf("stopped processes used %v of CPU in 1.5 s", used)
	}

	if err := c.Renew(t.Context()); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if used := usedOver(t, 300*time.Millisecond); used == 0 {
		t.Errorf("after a renewal the processes did not run on")
	}

	if err := c.Pause(t.Context()); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if used := usedOver(t, 300*time.Millisecond); used > 0 {
		t.Errorf("paused processes used %v of CPU", used)
	}
	for range 3 {
		if err := c.Renew(t.Context()); err != nil {
			t.Fatalf("Renew while paused: %v", err)
		}
	}
	if used := usedOver(t, 300*time.Millisecond); used > 0 {
		t.Errorf("a renewal undid a Pause: the processes used %v of CPU", used)
	}
	if _, err := c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxPaused) {
		t.Errorf("Exec while paused: %v, want ErrPaused", err)
	}
	if h, err := c.Health(t.Context()); err != nil || !h.Paused {
		t.Errorf("Health while paused: %+v, %v; want Paused", h, err)
	}
	if err := c.Resume(t.Context()); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if used := usedOver(t, 300*time.Millisecond); used == 0 {
		t.Errorf("after Resume the processes did not run on")
	}
	for _, p := range children(t) {
		_ = unix.Kill(p, unix.SIGKILL)
	}
}

// waitStill waits until the test's descendants use no CPU for 300 ms.
func waitStill(t *testing.T, d time.Duration, what string) {
	t.Helper()
	waitFor(t, d, what, func() bool { return usedOver(t, 300*time.Millisecond) == 0 })
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %v", what, d)
		}
	}
}

// usedOver is the CPU the test's descendants use over d.
func usedOver(t *testing.T, d time.Duration) time.Duration {
	before := cpu(t)
	time.Sleep(d)
	return cpu(t) - before
}

// cpu sums the CPU time of the test process's descendants, from /proc,
// in clock ticks of 10 ms.
func cpu(t *testing.T) time.Duration {
	var ticks uint64
	for _, pid := range descendantsOf(os.Getpid()) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		u, _ := strconv.ParseUint(f[11], 10, 64)
		s, _ := strconv.ParseUint(f[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func children(t *testing.T) []int { return descendantsOf(os.Getpid()) }

func descendantsOf(pid int) []int {
	var out []int
	for _, p := range (&lease{self: pid}).descendants() {
		if p.state != 'Z' {
			out = append(out, p.pid)
		}
	}
	return out
}
