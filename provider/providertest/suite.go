package providertest

import (
	"github.com/berth-dev/berth/internal/randid"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
)

// Harness says how to reach the provider under test.
type Harness struct {
	// Open returns the provider under test. The suite may call it several
	// times in one test; every provider it returns must see the same
	// sandboxes (as a new process on the same host would), so the suite
	// can test reconnecting by id.
	Open func(t *testing.T) provider.Provider
	// Spec, if set, adjusts every spec the suite creates (e.g. to add an
	// image).
	Spec func(provider.Spec) provider.Spec
	// DaemonRSS, if set, returns the resident memory in bytes of the
	// in-sandbox daemon of a sandbox (used to check that memory stays
	// bounded); tests needing it skip with a clear message when nil.
	DaemonRSS func(t *testing.T, sb provider.Sandbox) int64
	// DaemonSocket, if set, returns the host path of the socket through
	// which the host reaches sb's daemon, for the test that replaces it
	// with a link to another sandbox's (as a process in a sandbox that
	// can write the socket's directory would); it is nil for providers
	// that reach their daemons through no socket on the host.
	DaemonSocket func(t *testing.T, sb provider.Sandbox) string
	// Processes, if set, lists the host pids of every process that runs
	// sb (its daemon and commands, or the kernel that runs them), for
	// the lease tests, which measure from the host the CPU a sandbox
	// uses; they skip with a clear message when it is nil.
	Processes func(t *testing.T, sb provider.Sandbox) []int
	// IdleCPU is the most CPU a sandbox whose processes are all stopped
	// may use in a second, as Processes count it: its daemon's and, on
	// a provider with a kernel of its own, that kernel's timers. Zero
	// means 20 ms.
	IdleCPU time.Duration
	// ApproximateMemory, when set, says why the provider enforces memory
	// limits by watching rather than through the kernel. The daemon's
	// own work (its reads fill a cache counted against the limit) may
	// then end a command holding nearly all the memory; the memory test
	// says so instead of failing, and still requires the daemon to serve.
	ApproximateMemory string
	// Network, if set, names test hosts for the Network group, which
	// skips without it.
	Network *NetworkTargets
	// MachinesHeldBy, when set, says that the provider's sandboxes run
	// on machines another run of the suite already holds to the
	// machine groups (MachineGroups), and names that run: the fakes of
	// hosted services all run berth's daemon in remotefake's machines,
	// which provider/remote's own suite tests. This run then holds the
	// provider to the other groups only, those of its API and transport.
	// Against a real service it must be empty.
	MachinesHeldBy string
	// StreamSize is what the huge-output and large-file tests move each
	// way; zero means four times the memory bound (256 MiB). A provider
	// whose transport is slow by design (AgentCore's relay moves each
	// piece in an API call) may move less, but at least twice the bound
	// (128 MiB): a side holding it whole still goes past the bound.
	StreamSize int64
}

// MachineGroups are the groups that test a sandbox's machine and its
// daemon, whatever the service that made the machine: escapes from the
// workspace through the daemon's file operations, hostile files, the
// machine's memory accounting, attacks on the kernel's shared
// resources. Limits is not among them: its huge outputs and files test
// the transport between host and daemon too.
var MachineGroups = []string{"Escape", "Hostile", "Memory", "Attack"}

// Run runs the conformance suite against the provider h opens.
func Run(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("providertest: Harness.Open is nil")
	}
	s := &suite{h: h, run: randid.Hex(4)}
	t.Logf("providertest: this run's sandboxes carry the label %s=%s", runLabel, s.run)
	// Groups run one after another, each its serial tests first, alone,
	// then the others groupParallel at a time, so that the serial heavy
	// tests have the machine to themselves.
	for _, g := range []group{
		{"Lifecycle", lifecycleTests()},
		{"Exec", execTests()},
		{"ExactlyOnce", onceTests()},
		{"Files", fileTests()},
		{"Escape", escapeTests()},
		{"Archive", archiveTests()},
		{"Hostile", hostileTests()},
		{"Pause", pauseTests()},
		{"Lease", leaseTests()},
		{"Limits", limitTests()},
		{"Memory", memoryTests()},
		{"Attack", attackTests()},
		{"Network", networkTests()},
	} {
		if h.MachinesHeldBy != "" && slices.Contains(MachineGroups, g.name) {
			t.Logf("providertest: group %s: the machines are %s's, held to it there", g.name, h.MachinesHeldBy)
			continue
		}
		t.Run(g.name, func(t *testing.T) { g.run(t, s) })
	}
}

// groupParallel is how many of a group's tests run at once. They spend
// most of their time waiting on sandboxes (a creation, a command, a
// destruction), not on the CPU: more than t.Parallel's default bound,
// GOMAXPROCS (2 on a small CI machine), keep the machine busy.
const groupParallel = 6

// run runs the group's serial tests one after another, then the others
// groupParallel at a time. t.Run called from several goroutines runs
// subtests at once without t.Parallel, and so without -parallel's bound.
func (g group) run(t *testing.T, s *suite) {
	var concurrent []test
	for _, tc := range g.tests {
		if !tc.serial {
			concurrent = append(concurrent, tc)
			continue
		}
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
	}
	slots := make(chan struct{}, groupParallel)
	var wg sync.WaitGroup
	for _, tc := range concurrent {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, s) })
		})
	}
	wg.Wait()
}

type group struct {
	name  string
	tests []test
}

// test is one subtest. Serial tests run alone: they need the process to
// themselves (t.Setenv) or the machine to themselves (heavy tests).
type test struct {
	name   string
	serial bool
	fn     func(t *testing.T, s *suite)
}

// runLabel marks every sandbox the suite names, so that leftovers of a
// crashed run can be found and destroyed by hand.
const runLabel = "berth-providertest-run"

// How long the suite waits. Every provider call has a deadline, so a hang
// fails the test that hit it, with a message, instead of the whole binary.
const (
	opTimeout     = 2 * time.Minute  // one provider call
	heavyTimeout  = 15 * time.Minute // a call that moves gigabytes
	settleTimeout = 30 * time.Second // something the provider does asynchronously
	pollInterval  = 50 * time.Millisecond
)

type suite struct {
	h   Harness
	run string
}

// open returns a provider from the harness.
func (s *suite) open(t *testing.T) provider.Provider {
	t.Helper()
	p := s.h.Open(t)
	if p == nil {
		t.Fatal("Harness.Open returned a nil provider")
	}
	return p
}

// newSpec is the spec most tests start from: a fresh id and the run label.
func (s *suite) newSpec(t *testing.T) provider.Spec {
	return provider.Spec{ID: s.newID(t), Labels: map[string]string{runLabel: s.run}}
}

// adjust applies the harness's changes to a spec the suite built.
func (s *suite) adjust(spec provider.Spec) provider.Spec {
	if s.h.Spec != nil {
		return s.h.Spec(spec)
	}
	return spec
}

// newID makes a sandbox id no other test or run uses, readable enough to
// tell which test a leftover sandbox came from.
func (s *suite) newID(t *testing.T) string {
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	slug := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '-'
	}, name)
	id := "pt-" + s.run + "-" + randid.Hex(3) + "-" + slug
	if len(id) > provider.MaxIDLen {
		id = id[:provider.MaxIDLen]
	}
	return strings.TrimRight(id, "-")
}

// mustCreate creates a sandbox from spec, adjusted by the harness, and
// destroys it when the test ends.
func (s *suite) mustCreate(t *testing.T, p provider.Provider, spec provider.Spec) provider.Sandbox {
	t.Helper()
	spec = s.adjust(spec)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create(id %q): %v", spec.ID, err)
	}
	destroyOnCleanup(t, sb)
	return sb
}

// mustCreateAll creates n sandboxes of fresh specs at once, for a test
// about what several sandboxes hold together rather than about their
// creation: one after another, ten took a minute of a provider whose
// Create waits on a service.
func (s *suite) mustCreateAll(t *testing.T, p provider.Provider, n int) []provider.Sandbox {
	t.Helper()
	sbs := make([]provider.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range sbs {
		spec := s.adjust(s.newSpec(t))
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
			defer cancel()
			if sbs[i], errs[i] = p.Create(ctx, spec); errs[i] != nil {
				errs[i] = fmt.Errorf("Create(id %q): %w", spec.ID, errs[i])
			}
		})
	}
	wg.Wait()
	for _, sb := range sbs {
		if sb != nil {
			destroyOnCleanup(t, sb)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return sbs
}

// createShortLived creates a sandbox with a lifetime of at least
// lifetime, which runs from the sandbox's creation: on a machine slow
// enough that a Create takes most of it, the sandbox may end before the
// Create does, which then fails; it is made again with a lifetime twice
// as long. A Create that fails well within its lifetime fails the test.
func (s *suite) createShortLived(t *testing.T, p provider.Provider, lifetime time.Duration) provider.Sandbox {
	t.Helper()
	for ; ; lifetime *= 2 {
		spec := s.adjust(s.newSpec(t))
		spec.Lifetime = lifetime
		ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
		start := time.Now()
		sb, err := p.Create(ctx, spec)
		took := time.Since(start)
		cancel()
		if err == nil {
			destroyOnCleanup(t, sb)
			return sb
		}
		if took < lifetime/2 || lifetime >= 32*time.Second {
			t.Fatalf("Create(id %q, lifetime %v) after %v: %v", spec.ID, lifetime, took.Round(time.Millisecond), err)
		}
		t.Logf("Create with a lifetime of %v failed after %v (%v): again with a longer one", lifetime, took.Round(time.Millisecond), err)
	}
}

// sandbox opens the provider and creates a sandbox from the default spec.
func (s *suite) sandbox(t *testing.T) (provider.Provider, provider.Sandbox) {
	t.Helper()
	p := s.open(t)
	return p, s.mustCreate(t, p, s.newSpec(t))
}

// destroyOnCleanup destroys sb when the test ends. Destroying twice is
// allowed, so tests that destroy on purpose need not undo this.
func destroyOnCleanup(t *testing.T, sb provider.Sandbox) {
	t.Cleanup(func() {
		// t.Context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("cleanup: Destroy(%s): %v", sb.ID(), err)
		}
	})
}

// timeout returns a context for the rest of the test that ends after d.
func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// result is an ExecResult with the output the caller received.
type result struct {
	provider.ExecResult
	stdout, stderr string
}

// execute runs req with its output captured, unless req brings its own
// writers, under a deadline of opTimeout.
func execute(t *testing.T, sb provider.Sandbox, req provider.ExecRequest) (result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	return executeCtx(ctx, sb, req)
}

func executeCtx(ctx context.Context, sb provider.Sandbox, req provider.ExecRequest) (result, error) {
	var stdout, stderr testkit.SyncBuffer
	if req.Stdout == nil {
		req.Stdout = &stdout
	}
	if req.Stderr == nil {
		req.Stderr = &stderr
	}
	res, err := sb.Exec(ctx, req)
	return result{ExecResult: res, stdout: stdout.String(), stderr: stderr.String()}, err
}

// run runs argv and fails the test if Exec fails; the exit code is the
// caller's to check.
func run(t *testing.T, sb provider.Sandbox, argv ...string) result {
	t.Helper()
	r, err := execute(t, sb, provider.ExecRequest{Argv: argv})
	if err != nil {
		t.Fatalf("Exec %q: %v", argv, err)
	}
	return r
}

// mustSh runs script with /bin/sh, args as $1..., and fails the test
// unless it exits 0. It returns the standard output.
func mustSh(t *testing.T, sb provider.Sandbox, script string, args ...string) string {
	t.Helper()
	r := run(t, sb, append([]string{"/bin/sh", "-c", script, "sh"}, args...)...)
	if r.ExitCode != 0 {
		t.Fatalf("sh -c %q: exit code %d (signal %q), stderr: %s", script, r.ExitCode, r.Signal, tail(r.stderr))
	}
	return r.stdout
}

// mustPython runs a python3 program, args as sys.argv[1:], and fails the
// test unless it exits 0. It returns the standard output.
func mustPython(t *testing.T, sb provider.Sandbox, program string, args ...string) string {
	t.Helper()
	r := run(t, sb, append([]string{python, "-c", program}, args...)...)
	if r.ExitCode != 0 {
		t.Fatalf("python3 program failed: exit code %d (signal %q), stderr: %s", r.ExitCode, r.Signal, tail(r.stderr))
	}
	return r.stdout
}

const python = "/usr/bin/python3"

// checkServing fails the test unless sb still runs commands.
func checkServing(t *testing.T, sb provider.Sandbox) {
	t.Helper()
	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{"echo", "ok"}})
	// Out of memory is the daemon's answer: it serves, and the processes
	// of the command before, killed, are still giving their memory back.
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, errdefs.ErrOutOfMemory) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		r, err = execute(t, sb, provider.ExecRequest{Argv: []string{"echo", "ok"}})
	}
	if err != nil {
		t.Fatalf("the sandbox no longer serves: echo ok: %v", err)
	}
	if r.ExitCode != 0 || r.stdout != "ok\n" {
		t.Fatalf("the sandbox no longer serves: echo ok gave exit code %d, stdout %q", r.ExitCode, r.stdout)
	}
}

func writeFile(t *testing.T, sb provider.Sandbox, path string, data []byte, mode fs.FileMode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	if err := sb.WriteFile(ctx, path, bytes.NewReader(data), mode); err != nil {
		t.Fatalf("WriteFile(%q): %v", path, err)
	}
}

// readFileErr reads a whole file, for files the test knows to be small.
func readFileErr(t *testing.T, sb provider.Sandbox, path string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	rc, err := sb.ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func readFile(t *testing.T, sb provider.Sandbox, path string) []byte {
	t.Helper()
	data, err := readFileErr(t, sb, path)
	if err != nil {
		t.Fatalf("ReadFile(%q): %v", path, err)
	}
	return data
}

func listDir(t *testing.T, sb provider.Sandbox, path string) []provider.FileInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	infos, err := sb.ListDir(ctx, path)
	if err != nil {
		t.Fatalf("ListDir(%q): %v", path, err)
	}
	return infos
}

func remove(t *testing.T, sb provider.Sandbox, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	if err := sb.Remove(ctx, path); err != nil {
		t.Fatalf("Remove(%q): %v", path, err)
	}
}

// entry finds name in a listing.
func entry(infos []provider.FileInfo, name string) (provider.FileInfo, bool) {
	for _, fi := range infos {
		if fi.Name == name {
			return fi, true
		}
	}
	return provider.FileInfo{}, false
}

// existsScript prints each of its arguments that exists, or is a dangling
// symbolic link, as the sandbox sees it.
const existsScript = `for p in "$@"; do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done`

// checkAbsentInSandbox fails the test for each path that exists in the
// sandbox's view of its file system.
func checkAbsentInSandbox(t *testing.T, sb provider.Sandbox, paths ...string) {
	t.Helper()
	if out := mustSh(t, sb, existsScript, paths...); out != "" {
		t.Errorf("escape: these paths outside the workspace exist inside the sandbox, and should not:\n%s", out)
	}
}

// checkAbsentOnHost fails the test for each path that exists on this
// machine. A host-bound provider that follows a path out of the workspace
// on the host side would leave its traces here rather than in the sandbox.
// What it finds is removed if it carries one of the suite's made-up
// names, so that a failing provider leaves no litter.
func checkAbsentOnHost(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("escape: %s exists on the host running the test (Lstat: %v), and should not", p, err)
			if strings.HasPrefix(filepath.Base(p), randomPrefix) {
				_ = os.Remove(p)
			}
		}
	}
}

// checkErrIs fails the test unless err wraps target.
func checkErrIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v (kind %s), want one wrapping %q", what, err, errdefs.KindOf(err), target)
	}
}

// eventually polls cond until it reports done, failing the test after d.
// cond describes what it saw, for the failure message.
func eventually(t *testing.T, d time.Duration, what string, cond func() (done bool, saw string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		done, saw := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not the case after %v; last saw: %s", what, d, saw)
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: test ended while waiting; last saw: %s", what, saw)
		case <-tick.C:
		}
	}
}

// randomName is a file name nothing else uses, for targets of escape
// attempts: a provider that lets one through creates a harmless new file
// instead of damaging a real one.
func randomName() string { return randomPrefix + randid.Hex(6) }

const randomPrefix = "berth-providertest-"

// signalWriter records output and closes first on the first write that
// carries bytes, noting when it came.
type signalWriter struct {
	testkit.SyncBuffer
	once  sync.Once
	first chan struct{}
	at    atomic.Int64 // UnixNano of the first write
}

func newSignalWriter() *signalWriter { return &signalWriter{first: make(chan struct{})} }

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.SyncBuffer.Write(p)
	if len(p) > 0 {
		w.once.Do(func() {
			w.at.Store(time.Now().UnixNano())
			close(w.first)
		})
	}
	return n, err
}

// countingWriter counts and discards.
type countingWriter struct{ n atomic.Int64 }

func (w *countingWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// describe shortens data for failure messages.
func describe(b []byte) string {
	const max = 200
	if len(b) <= max {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q... (%d bytes)", b[:max], len(b))
}
