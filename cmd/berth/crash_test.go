package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/workflows"
)

// The crash tests run the real binaries against a real server, with the
// real linux provider, and break things while a command runs. A command
// proves it ran once by appending a line to a file of its workspace and
// printing the file at its end: two runs would print two lines. It waits
// for the test to create the file "go" in its workspace, so that it is
// running for as long as the test needs, and no longer.
const waitGo = "while [ ! -e go ]; do sleep 0.05; done"

// TestWorkerKilledMidCommand kills the only worker with SIGKILL while a
// command runs, and starts another on the same host: the command runs
// once, its output is whole and its result arrives. The worker dies
// either while it runs the command as a local activity, in its first
// moments (the workflow task is then retried on the new worker, whose
// local activity attaches to the command), or later, in the Exec
// activity it was handed to (the activity is retried once its heartbeat
// times out, and attaches to it).
func TestWorkerKilledMidCommand(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"local activity", "activity"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			berth, data := berthBinary(t), dataDir(t)
			srv := startServer(t, data, "127.0.0.1:0")
			addr := srv.Address()
			c := dial1(t, addr)
			w1 := startWorker(t, berth, addr, data, "first worker")
			id := detach(t, berth, addr, data, "sh", "-c", "echo before; echo ran >> log; "+waitGo+"; echo after; cat log; exit 4")
			waitSandboxFile(t, data, "log")
			if when == "activity" {
				testkit.Eventually(t, "the Exec activity on the first worker", time.Minute, func() bool { return execRunningOn(t, c, id, w1) })
				if d := execHeartbeatTimeout(t, c, id); d != workerHeartbeat {
					t.Errorf("the Exec activity's heartbeat timeout is %v, want the worker's --heartbeat-timeout, %v", d, workerHeartbeat)
				}
			}

			w1.kill(t)
			w2 := startWorker(t, berth, addr, data, "second worker")
			// The new worker is slow to take over: the server waits for
			// the workflow task's timeout, or the heartbeat's
			// (workerHeartbeat), to take the first worker for dead.
			testkit.Eventually(t, "the Exec activity on the second worker", time.Minute, func() bool { return execRunningOn(t, c, id, w2) })
			touchSandboxFile(t, data, "go")

			stdout, stderr, code := runBerth(t, berth, "logs", "--address", addr, id)
			if code != 4 || stdout != "before\nafter\nran\n" {
				t.Errorf("after the worker was killed: exit %d, stdout %q, stderr %q; want exit 4, the whole output and one run", code, stdout, stderr)
			}
			sandboxesDestroyed(t, data)
		})
	}
}

// TestServerRestartedMidRun stops the Temporal server while a command
// runs, until the command has ended, and starts it again on the same
// database and port; the worker and a berth run following the run live
// both ride it out: the run completes, with the command's exit code, and
// the command runs once.
func TestServerRestartedMidRun(t *testing.T) {
	t.Parallel()
	berth, data := berthBinary(t), dataDir(t)
	srv := startServer(t, data, "127.0.0.1:0")
	addr := srv.Address()
	startWorker(t, berth, addr, data, "worker")

	run := startBerth(t, berth, "run", "--address", addr, "--",
		"sh", "-c", "echo ran >> log; "+waitGo+"; cat log; touch end; exit 4")
	waitSandboxFile(t, data, "log")
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop the server: %v", err)
	}
	// The command ends while the server is down: its result waits.
	touchSandboxFile(t, data, "go")
	waitSandboxFile(t, data, "end")
	startServer(t, data, addr)

	code := run.wait(t, 2*time.Minute)
	if code != 4 || run.stdout.String() != "ran\n" {
		t.Errorf("berth run across the restart: exit %d, stdout %q, stderr %q; want exit 4 and one run",
			code, run.stdout.String(), run.stderr.String())
	}
	sandboxesDestroyed(t, data)
}

// TestRunCancelled interrupts a berth run: it cancels its run, whose
// workflow destroys the sandbox on its way out, says so and exits 130.
// Interrupting berth logs, on the other hand, leaves the run alone.
func TestRunCancelled(t *testing.T) {
	t.Parallel()
	berth, data := berthBinary(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	c := dial1(t, addr)

	t.Run("berth run", func(t *testing.T) {
		// The command would run for an hour: berth run that waited for
		// it instead of canceling it would fail the wait below, however
		// loaded the machine.
		run := startBerth(t, berth, "run", "--address", addr, "--", "sh", "-c", "touch started; exec sleep 3600")
		waitSandboxFile(t, data, "started")
		if err := run.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		code := run.wait(t, 2*time.Minute)
		stderr := run.stderr.String()
		if code != 130 || !strings.Contains(stderr, "canceled; its sandbox is destroyed") {
			t.Fatalf("interrupted berth run: exit %d, stderr %q; want exit 130 and a line saying it was canceled", code, stderr)
		}
		m := regexp.MustCompile(`run (run-[0-9a-f]+) canceled`).FindStringSubmatch(stderr)
		if m == nil {
			t.Fatalf("no run id in %q", stderr)
		}
		desc, err := c.DescribeWorkflowExecution(t.Context(), m[1], "")
		if err != nil {
			t.Fatal(err)
		}
		if st := desc.WorkflowExecutionInfo.Status; st != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
			t.Errorf("workflow %s is %v, want canceled", m[1], st)
		}
		// berth run said the sandbox is destroyed: it must be, already.
		if left := sandboxDirs(t, data); len(left) > 0 {
			t.Errorf("sandboxes left after the cancellation: %v", left)
		}
	})
	t.Run("berth logs", func(t *testing.T) {
		id := detach(t, berth, addr, data, "sh", "-c", "echo begun; sleep 2; echo done")
		logs := startBerth(t, berth, "logs", "--address", addr, id)
		// berth logs follows the run once it has printed its start.
		testkit.Eventually(t, "berth logs to print the run's output", time.Minute, func() bool { return logs.stdout.String() != "" })
		if err := logs.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if code := logs.wait(t, time.Minute); code != 130 || !strings.Contains(logs.stderr.String(), "it goes on") {
			t.Errorf("interrupted berth logs: exit %d, stderr %q; want exit 130 and a line saying the run goes on", code, logs.stderr.String())
		}
		stdout, stderr, code := runBerth(t, berth, "logs", "--address", addr, id)
		if code != 0 || stdout != "begun\ndone\n" {
			t.Errorf("berth logs again: exit %d, stdout %q, stderr %q; want the run's own end", code, stdout, stderr)
		}
	})
}

// TestLargeOutputHistorySmall runs a command that prints 64 MiB: berth
// logs prints all of it, live and after the run, and the workflow's
// history holds only a bounded head and tail of it: 64 MiB is 32 times
// the 2 MiB of history it may take.
func TestLargeOutputHistorySmall(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	berth, data := berthBinary(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	c := dial1(t, addr)

	// Numbered lines: a part lost, repeated or out of order changes the
	// hash.
	id := detach(t, berth, addr, data, "sh", "-c", fmt.Sprintf("seq 1 100000000 | head -c %d", size))
	want := seqHash(size)
	for _, when := range []string{"live", "after the run"} {
		start := time.Now()
		n, sum, stderr, code := hashBerth(t, berth, "logs", "--address", addr, id)
		if code != 0 || n != size || sum != want {
			t.Fatalf("berth logs, %s: exit %d, %d bytes, sha256 %s, stderr %q; want exit 0, %d bytes, sha256 %s",
				when, code, n, sum, stderr, size, want)
		}
		t.Logf("berth logs, %s: %d bytes in %v", when, n, time.Since(start).Round(time.Millisecond))
	}

	var out workflows.RunOutput
	if err := c.GetWorkflow(t.Context(), id, "").Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if o := out.Stdout; o.Size != size || !o.Truncated || o.Incomplete || len(o.Inline) > 256<<10 {
		t.Errorf("the result's stdout: size %d, truncated %v, incomplete %v, %d bytes inline; want %d, truncated, complete, at most 256 KiB inline",
			o.Size, o.Truncated, o.Incomplete, len(o.Inline), size)
	}
	events, bytes := 0, 0
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		events++
		bytes += proto.Size(e)
	}
	t.Logf("history: %d events, %d bytes", events, bytes)
	if bytes > 2<<20 || events > 50 {
		t.Errorf("history of a run printing %d bytes: %d events, %d bytes; want at most 50 events and 2 MiB", size, events, bytes)
	}
	sandboxesDestroyed(t, data)
}

// historyTail is the last n events of workflow id's current run, one
// line each: what a workflow that did not do what a test waited for
// was doing instead.
func historyTail(t *testing.T, c client.Client, id string, n int) string {
	t.Helper()
	var lines []string
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return strings.Join(lines, "\n") + "\n" + err.Error()
		}
		line := fmt.Sprintf("%d %s %s", e.GetEventId(), e.GetEventTime().AsTime().Format("15:04:05.000"), e.GetEventType())
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			line += " " + a.GetActivityType().GetName()
		}
		if a := e.GetTimerStartedEventAttributes(); a != nil {
			line += " " + a.GetStartToFireTimeout().AsDuration().String()
		}
		if a := e.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			line += " " + a.GetAcceptedRequest().GetInput().GetName()
		}
		lines = append(lines, line)
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// seqHash is the sha256 of the first size bytes of seq 1 N's output.
func seqHash(size int) string {
	h := sha256.New()
	w := bufio.NewWriterSize(h, 1<<16)
	var line []byte
	for i, n := 1, 0; n < size; i++ {
		line = strconv.AppendInt(line[:0], int64(i), 10)
		line = append(line, '\n')
		if n+len(line) > size {
			line = line[:size-n]
		}
		w.Write(line)
		n += len(line)
	}
	w.Flush()
	return hex.EncodeToString(h.Sum(nil))
}

// shared is the berth binary the crash tests share: building it takes
// a while, more on a loaded machine.
var shared struct {
	once  sync.Once
	dir   string
	berth string
	err   error
}

// berthBinary builds berth, berth-host and berth-sandboxd once for the package's
// tests; TestMain removes them.
func berthBinary(t testing.TB) string {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "berth-bin"); shared.err != nil {
			return
		}
		// As README builds them, the daemon static for Docker images,
		// but without DWARF (-w), which no test reads and which is near
		// half of linking berth-host; the two builds side by side.
		host := exec.Command("go", "build", "-ldflags=-w", "-o", shared.dir+"/", "github.com/berth-dev/berth/cmd/berth", "github.com/berth-dev/berth/cmd/berth-host")
		daemon := exec.Command("go", "build", "-ldflags=-w", "-o", shared.dir+"/", "github.com/berth-dev/berth/cmd/berth-sandboxd")
		daemon.Env = append(os.Environ(), "CGO_ENABLED=0")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, cmd := range []*exec.Cmd{host, daemon} {
			wg.Go(func() {
				if out, err := cmd.CombinedOutput(); err != nil {
					errs[i] = fmt.Errorf("build: %v\n%s", err, out)
				}
			})
		}
		wg.Wait()
		if shared.err = errors.Join(errs...); shared.err != nil {
			return
		}
		shared.berth = filepath.Join(shared.dir, "berth")
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.berth
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// hashBerth runs berth and returns the size and sha256 of its stdout,
// without keeping it.
func hashBerth(t *testing.T, berth string, args ...string) (n int64, sum, stderr string, code int) {
	t.Helper()
	var e testkit.SyncBuffer
	h := &countingHash{Hash: sha256.New()}
	code = runCommand(t, berth, args, h, &e)
	return h.n, hex.EncodeToString(h.Sum(nil)), e.String(), code
}

// countingHash is a hash that counts what it was given.
type countingHash struct {
	hash.Hash
	n int64
}

func (h *countingHash) Write(p []byte) (int, error) {
	h.n += int64(len(p))
	return h.Hash.Write(p)
}

// startServer starts an embedded Temporal server on data's database, in
// the test's process, and stops it when the test ends.
func startServer(t *testing.T, data, addr string) *devserver.Server {
	t.Helper()
	var log testkit.SyncBuffer
	srv, err := devserver.Start(t.Context(), devserver.Options{
		DataDir: filepath.Join(data, "temporal"),
		Address: addr,
		Logger:  slog.New(slog.NewTextHandler(&log, nil)),
	})
	if err != nil {
		t.Fatalf("start the server: %v", err)
	}
	t.Cleanup(func() {
		stopped := make(chan struct{})
		go func() { srv.Stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(time.Minute):
			t.Errorf("the server at %s did not stop within a minute", srv.Address())
		}
	})
	dumpOnFailure(t, "server "+srv.Address(), &log)
	return srv
}

// worker is a berth worker process.
type worker struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// workerHeartbeat is the heartbeat timeout of the workers startWorker
// starts: a worker killed in an activity is taken for dead in seconds,
// not after sandbox.DefaultHeartbeatTimeout.
const workerHeartbeat = 5 * time.Second

// startWorker starts berth worker against the server at addr, with its
// sandboxes and blob store in data, and waits until it is ready. It is
// stopped when the test ends, and its log shown if the test failed.
func startWorker(t *testing.T, berth, addr, data, name string) *worker {
	t.Helper()
	log := new(testkit.SyncBuffer)
	dumpOnFailure(t, name, log)
	cmd := exec.Command(berth, append([]string{"worker", "--data-dir", data, "--heartbeat-timeout", workerHeartbeat.String()}, devDefaults...)...)
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+addr, "TEMPORAL_NAMESPACE=default")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, exited: make(chan struct{})}
	go func() { cmd.Wait(); close(w.exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-w.exited:
		case <-time.After(15 * time.Second):
			w.kill(t)
		}
	})
	deadline := time.After(time.Minute)
	for !strings.Contains(log.String(), "berth worker is ready") {
		select {
		case <-w.exited:
			t.Fatalf("berth worker exited:\n%s", log.String())
		case <-deadline:
			t.Fatalf("berth worker did not come up:\n%s", log.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return w
}

// kill kills the worker with SIGKILL and waits until it is dead.
func (w *worker) kill(t *testing.T) {
	t.Helper()
	w.cmd.Process.Kill()
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("a killed worker did not exit")
	}
}

// process is a berth command running in the background.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr testkit.SyncBuffer
	exited         chan struct{}
}

// startBerth starts berth; it is killed if still running when the test
// ends.
func startBerth(t *testing.T, berth string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(berth, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr, p.cmd.Dir = &p.stdout, &p.stderr, t.TempDir()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// wait waits for the process to exit, at most timeout, and returns its
// exit code.
func (p *process) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("berth %v still running after %v; stdout %q, stderr %q",
			p.cmd.Args[1:], timeout, p.stdout.String(), p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// detach starts a run with berth run --detach and returns its id.
func detach(t *testing.T, berth, addr, data string, argv ...string) string {
	t.Helper()
	args := append([]string{"run", "--address", addr, "--detach", "--"}, argv...)
	stdout, stderr, code := runBerth(t, berth, args...)
	id := strings.TrimSpace(stdout)
	if code != 0 || !strings.HasPrefix(id, "run-") {
		t.Fatalf("berth run --detach: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	return id
}

// waitSandboxFile waits until a sandbox of data has a file at path in its
// workspace: the command is running.
func waitSandboxFile(t *testing.T, data, path string) {
	t.Helper()
	testkit.Eventually(t, path+" in a sandbox's workspace (the command to start)", time.Minute, func() bool {
		for _, dir := range sandboxDirs(t, data) {
			if ws := sandboxWorkspace(data, dir); ws != "" {
				if _, err := os.Stat(filepath.Join(ws, path)); err == nil {
					return true
				}
			}
		}
		return false
	})
}

// sandboxWorkspace is where the host sees a sandbox's workspace: its
// file system is mounted only inside the sandbox, so through its
// daemon's root. Empty while the sandbox is not running.
func sandboxWorkspace(data, dir string) string {
	b, err := os.ReadFile(filepath.Join(data, "linux", dir, "sandbox.json"))
	if err != nil {
		return ""
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if json.Unmarshal(b, &rec) != nil || rec.PID == 0 {
		return ""
	}
	return fmt.Sprintf("/proc/%d/root/workspace", rec.PID)
}

// touchSandboxFile creates an empty file at path in the workspace of
// data's sandbox.
func touchSandboxFile(t *testing.T, data, path string) {
	t.Helper()
	dirs := sandboxDirs(t, data)
	if len(dirs) != 1 {
		t.Fatalf("sandboxes: %v, want one", dirs)
	}
	if err := os.WriteFile(filepath.Join(sandboxWorkspace(data, dirs[0]), path), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sandboxesDestroyed waits for a finished run's sandbox to be gone: berth
// run and berth logs return with the command's result, and the run
// destroys its sandbox after.
func sandboxesDestroyed(t *testing.T, data string) {
	t.Helper()
	testkit.Eventually(t, "the run's sandbox destroyed", 30*time.Second, func() bool {
		return len(sandboxDirs(t, data)) == 0
	})
}

// sandboxDirs lists the sandboxes whose state is in data: the linux
// provider's directories other than its own dot-directories.
func sandboxDirs(t *testing.T, data string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(data, "linux"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, e.Name())
		}
	}
	return dirs
}

// execRunningOn says whether a run's Exec activity is running on w.
// execHeartbeatTimeout is the heartbeat timeout the first Exec activity
// of workflow id was scheduled with.
func execHeartbeatTimeout(t *testing.T, c client.Client, id string) time.Duration {
	t.Helper()
	it := c.GetWorkflowHistory(t.Context(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "Exec" {
			return a.GetHeartbeatTimeout().AsDuration()
		}
	}
	t.Fatalf("no Exec activity in %s's history", id)
	return 0
}

func execRunningOn(t *testing.T, c client.Client, id string, w *worker) bool {
	t.Helper()
	desc, err := c.DescribeWorkflowExecution(t.Context(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range desc.PendingActivities {
		if a.GetActivityType().GetName() == "Exec" && a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED &&
			strings.HasPrefix(a.GetLastWorkerIdentity(), fmt.Sprintf("%d@", w.cmd.Process.Pid)) {
			return true
		}
	}
	return false
}

// dial1 connects a client to the server at addr for the test's length.
func dial1(t *testing.T, addr string) client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: addr,
		Logger: hostworker.Logger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// stopDev stops berth dev, and shows its log if the test failed.
func stopDev(t testing.TB, dev *exec.Cmd, log *testkit.SyncBuffer) {
	// Wait belongs to startDev: poll for the process to be gone.
	dev.Process.Signal(os.Interrupt)
	for deadline := time.Now().Add(15 * time.Second); syscall.Kill(dev.Process.Pid, 0) == nil; {
		if time.Now().After(deadline) {
			dev.Process.Kill()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if t.Failed() {
		t.Logf("berth dev:\n%s", log.String())
	}
}

// dumpOnFailure shows a log when the test has failed, at its end.
func dumpOnFailure(t testing.TB, name string, log *testkit.SyncBuffer) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s:\n%s", name, log.String())
		}
	})
}
