package providertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// The lease (Spec.Lease, provider.Leaser): a sandbox whose host has gone
// stops its own processes, and ends itself at its lifetime, paused or
// not. Every check of CPU is made from the host (Harness.Processes),
// and between contacts the tests touch the sandbox only through Info,
// which is not contact.
func leaseTests() []test {
	return []test{
		{name: "StopsWithoutHost", fn: testLeaseStops},
		{name: "StopsForkingProcesses", fn: testLeaseStopsForking},
		{name: "PausedStaysPaused", fn: testLeasePausedStaysPaused},
		{name: "EndsAtLifetime", fn: func(t *testing.T, s *suite) { testLeaseEnds(t, s, false) }},
		{name: "PausedEndsAtLifetime", fn: func(t *testing.T, s *suite) { testLeaseEnds(t, s, true) }},
		{name: "DestroyAfter", fn: testLeaseDestroyAfter},
	}
}

const (
	testLease = time.Second
	// leaseSlack is how long past its lease a sandbox may take to stop.
	leaseSlack = 5 * time.Second
	// cpuWindow is how long CPU use is measured over; defaultIdleCPU
	// the most a stopped sandbox may use in it (see Harness.IdleCPU).
	// A busy loop uses all of a core, or, on a machine loaded many
	// times over, a tenth of one.
	cpuWindow      = time.Second
	defaultIdleCPU = 20 * time.Millisecond
)

// busyLoop starts a loop that spins in the background and prints its pid.
const busyLoop = `nohup sh -c 'while :; do :; done' > /dev/null 2>&1 & echo $!`

// forkLoop starts a loop that forks without end and prints its pid.
const forkLoop = `nohup sh -c 'while :; do /bin/true; done' > /dev/null 2>&1 & echo $!`

// leased creates a sandbox with the test lease and lifetime (zero: the
// default), and starts script in it, returning the pid it prints.
func (s *suite) leased(t *testing.T, lifetime time.Duration, script string) (provider.Provider, provider.Sandbox, string) {
	t.Helper()
	p := s.open(t)
	if s.h.Processes == nil {
		t.Skip("skipped: the harness cannot see a sandbox's processes from the host (Harness.Processes is nil)")
	}
	spec := s.newSpec(t)
	spec.Lease, spec.Lifetime = testLease, lifetime
	sb := s.mustCreate(t, p, spec)
	if _, ok := sb.(provider.Leaser); !ok {
		t.Skipf("skipped: provider %q keeps no lease (its sandboxes do not implement provider.Leaser)", p.Name())
	}
	var pid string
	held(t, sb, func() { pid = strings.TrimSpace(mustSh(t, sb, script)) })
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("the loop's pid: %q", pid)
	}
	return p, sb, pid
}

// idleCPU is the most CPU a stopped sandbox may use in cpuWindow.
func (s *suite) idleCPU() time.Duration {
	if s.h.IdleCPU > 0 {
		return s.h.IdleCPU
	}
	return defaultIdleCPU
}

// cpuOver is the CPU sb's processes use over d, as the host sees it.
func (s *suite) cpuOver(t *testing.T, sb provider.Sandbox, d time.Duration) time.Duration {
	t.Helper()
	before := hostCPU(s.h.Processes(t, sb))
	time.Sleep(d)
	return hostCPU(s.h.Processes(t, sb)) - before
}

// waitStopped waits until sb's processes use no CPU, and reports how
// long that took.
func (s *suite) waitStopped(t *testing.T, sb provider.Sandbox, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	var used time.Duration
	eventually(t, within, what, func() (bool, string) {
		used = s.cpuOver(t, sb, cpuWindow)
		return used <= s.idleCPU(), fmt.Sprintf("%v of CPU in %v", used, cpuWindow)
	})
	return time.Since(start)
}

// checkBusy fails the test unless sb's processes use CPU, renewing its
// lease meanwhile, as a host that holds it does.
func (s *suite) checkBusy(t *testing.T, sb provider.Sandbox, what string) {
	t.Helper()
	var used time.Duration
	eventually(t, 20*time.Second, what, func() (bool, string) {
		ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
		defer cancel()
		if err := sb.(provider.Leaser).Renew(ctx); err != nil {
			t.Fatalf("Renew: %v", err)
		}
		used = s.cpuOver(t, sb, cpuWindow)
		return used > s.idleCPU(), fmt.Sprintf("%v of CPU in %v", used, cpuWindow)
	})
}

// checkAlive fails the test unless sb serves and the process pid still
// runs in it.
func checkAlive(t *testing.T, sb provider.Sandbox, pid string) {
	t.Helper()
	held(t, sb, func() {
		checkServing(t, sb)
		if r := run(t, sb, "/bin/sh", "-c", "kill -0 "+pid); r.ExitCode != 0 {
			t.Errorf("the loop (pid %s) is gone: kill -0 exit code %d, %s", pid, r.ExitCode, tail(r.stderr))
		}
	})
}

// held runs f, which uses sb, renewing sb's lease meanwhile, as a host
// that holds a sandbox does through its commands: a request in flight
// is not contact, and on a machine slow enough a command outlasts the
// test lease, which would stop the very command f waits for.
func held(t *testing.T, sb provider.Sandbox, f func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(testLease / 4)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// A failed renewal shows as the failure of what f does.
				_ = sb.(provider.Leaser).Renew(ctx)
			}
		}
	}()
	defer func() { cancel(); <-done }()
	f()
}

func testLeaseStops(t *testing.T, s *suite) {
	_, sb, pid := s.leased(t, 0, busyLoop)
	s.checkBusy(t, sb, "the busy loop uses CPU")
	took := s.waitStopped(t, sb, testLease+leaseSlack, "with no contact for its lease, the sandbox's processes stop")
	t.Logf("stopped within %v of the last contact (lease %v)", took.Round(100*time.Millisecond), testLease)
	// Contact wakes it, and the same loop goes on.
	checkAlive(t, sb, pid)
	s.checkBusy(t, sb, "after contact the loop runs on")
}

func testLeaseStopsForking(t *testing.T, s *suite) {
	_, sb, pid := s.leased(t, 0, forkLoop)
	s.checkBusy(t, sb, "the forking loop uses CPU")
	s.waitStopped(t, sb, testLease+leaseSlack, "with no contact for its lease, a forking process stops")
	// Held, not merely caught between forks. A process that escaped
	// runs in every window; on a loaded machine the daemon's own sweep
	// may take more than its due in one, so one over is looked at again.
	if used := s.cpuOver(t, sb, 2*cpuWindow); used > 2*s.idleCPU() {
		if again := s.cpuOver(t, sb, 2*cpuWindow); again > 2*s.idleCPU() {
			t.Errorf("a stopped sandbox used %v, then %v, of CPU over %v each: a forked process escaped", used, again, 2*cpuWindow)
		}
	}
	checkAlive(t, sb, pid)
	s.checkBusy(t, sb, "after contact the forking loop runs on")
}

func testLeasePausedStaysPaused(t *testing.T, s *suite) {
	p, sb, pid := s.leased(t, 0, busyLoop)
	skipUnlessPause(t, p)
	s.checkBusy(t, sb, "the busy loop uses CPU")
	ctx := timeout(t, opTimeout)
	if err := asPauser(t, sb).Pause(ctx); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	s.waitStopped(t, sb, leaseSlack, "a paused sandbox's processes stop")
	// Renewals, as a host holding the sandbox makes them, for more than
	// the lease: none undoes the Pause.
	for range 4 {
		if err := sb.(provider.Leaser).Renew(ctx); err != nil {
			t.Fatalf("Renew of a paused sandbox: %v", err)
		}
		if used := s.cpuOver(t, sb, cpuWindow); used > s.idleCPU() {
			t.Fatalf("a renewal undid a Pause: the paused sandbox used %v of CPU in %v", used, cpuWindow)
		}
	}
	if info, err := sb.Info(ctx); err != nil || info.State != provider.StatePaused {
		t.Errorf("Info after renewals of a paused sandbox: state %q, err %v; want %q", info.State, err, provider.StatePaused)
	}
	if err := asPauser(t, sb).Resume(ctx); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	checkAlive(t, sb, pid)
	s.checkBusy(t, sb, "after Resume the loop runs on")
}

// testLeaseEnds leaves a sandbox with a busy loop and a short lifetime
// alone, paused first if pause: it must end by itself at its lifetime,
// its processes gone from the host.
func testLeaseEnds(t *testing.T, s *suite, pause bool) {
	sb, info := s.leasedToEnd(t, pause)
	eventually(t, time.Until(info.ExpiresAt)+settleTimeout, "the sandbox ends by itself at its lifetime", func() (bool, string) {
		if pids := s.h.Processes(t, sb); len(pids) > 0 {
			return false, fmt.Sprintf("%d processes on the host", len(pids))
		}
		ctx, cancel := context.WithTimeout(t.Context(), settleTimeout)
		defer cancel()
		info, err := sb.Info(ctx)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			return true, "gone"
		case err != nil:
			return false, "Info: " + err.Error()
		}
		return info.State == provider.StateLost, "state " + string(info.State)
	})
	if late := time.Since(info.ExpiresAt); late > 0 {
		t.Logf("ended %v after its lifetime", late.Round(100*time.Millisecond))
	}
}

// leasedToEnd creates a sandbox with a short lifetime and a busy loop,
// paused if pause, and returns it with the Info read once all that is
// done. Its lifetime runs from its creation, so on a machine slow
// enough that the setup takes most of it, the sandbox ends before the
// test has begun: it is then made again with a lifetime twice as long.
// A failure well within the lifetime fails the test.
func (s *suite) leasedToEnd(t *testing.T, pause bool) (provider.Sandbox, provider.Info) {
	t.Helper()
	p := s.open(t)
	if s.h.Processes == nil {
		t.Skip("skipped: the harness cannot see a sandbox's processes from the host (Harness.Processes is nil)")
	}
	if pause {
		skipUnlessPause(t, p)
	}
	const maxLifetime = 32 * time.Second
	for lifetime := 4 * time.Second; ; lifetime *= 2 {
		start := time.Now()
		sb, info, err := s.tryLeasedToEnd(t, p, lifetime, pause)
		took := time.Since(start)
		if err == nil && time.Until(info.ExpiresAt) > lifetime/4 {
			return sb, info
		}
		if err != nil && took < lifetime/2 {
			t.Fatal(err)
		}
		if lifetime >= maxLifetime {
			t.Fatalf("setting up a sandbox with a %v lifetime took %v: %v", lifetime, took.Round(time.Millisecond), err)
		}
		t.Logf("setting up a sandbox with a %v lifetime took %v (%v): again with a longer one", lifetime, took.Round(time.Millisecond), err)
	}
}

func (s *suite) tryLeasedToEnd(t *testing.T, p provider.Provider, lifetime time.Duration, pause bool) (provider.Sandbox, provider.Info, error) {
	spec := s.adjust(s.newSpec(t))
	spec.Lease, spec.Lifetime = testLease, lifetime
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		return nil, provider.Info{}, fmt.Errorf("create: %w", err)
	}
	destroyOnCleanup(t, sb)
	if _, ok := sb.(provider.Leaser); !ok {
		t.Skipf("skipped: provider %q keeps no lease (its sandboxes do not implement provider.Leaser)", p.Name())
	}
	var r result
	held(t, sb, func() { r, err = executeCtx(ctx, sb, provider.ExecRequest{Argv: []string{"/bin/sh", "-c", busyLoop}}) })
	switch {
	case err != nil:
		return nil, provider.Info{}, fmt.Errorf("exec of the busy loop: %w", err)
	case r.ExitCode != 0:
		return nil, provider.Info{}, fmt.Errorf("the busy loop: exit code %d, stderr: %s", r.ExitCode, tail(r.stderr))
	}
	if pause {
		if err := asPauser(t, sb).Pause(ctx); err != nil {
			return nil, provider.Info{}, fmt.Errorf("pause: %w", err)
		}
	}
	info, err := sb.Info(ctx)
	if err != nil {
		return nil, provider.Info{}, fmt.Errorf("info: %w", err)
	}
	return sb, info, nil
}

func testLeaseDestroyAfter(t *testing.T, s *suite) {
	p, sb, _ := s.leased(t, 0, forkLoop)
	s.waitStopped(t, sb, testLease+leaseSlack, "with no contact for its lease, the sandbox's processes stop")
	ctx := timeout(t, opTimeout)
	start := time.Now()
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("Destroy of a sandbox its lease stopped: %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Destroy of a sandbox its lease stopped took %v", took)
	}
	_, err := p.Get(ctx, sb.ID())
	checkErrIs(t, err, errdefs.ErrNotFound, "Get after Destroy")
}

// hostCPU sums the CPU time (user and system) that the processes pids
// and the children they reaped have used, as /proc on the host counts it; pids gone count nothing.
func hostCPU(pids []int) time.Duration {
	var ticks uint64
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 15 {
			continue
		}
		// Its own, and that of the children it has reaped: a process
		// that ends between two readings leaves its time to its parent.
		for _, v := range f[11:15] {
			n, _ := strconv.ParseUint(v, 10, 64)
			ticks += n
		}
	}
	// USER_HZ is 100 on every Linux that berth runs on.
	return time.Duration(ticks) * 10 * time.Millisecond
}
