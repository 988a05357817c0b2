package hostworker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// loopScript starts a loop in the background that appends the time, in
// nanoseconds, to the file loop twenty times a second.
const loopScript = `nohup sh -c 'while :; do date +%s%N >> loop; sleep 0.05; done' >/dev/null 2>&1 &`

// workspace is where the host sees a linux sandbox's workspace, through
// its daemon's root: readable while the sandbox is frozen.
func workspace(t *testing.T, data, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "linux", id, "sandbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.PID == 0 {
		t.Fatalf("sandbox %s's record: %s", id, b)
	}
	return fmt.Sprintf("/proc/%d/root/workspace", rec.PID)
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

// startSandbox starts a standalone linux sandbox that never idles and
// waits until it is created.
func startSandbox(t *testing.T, c client.Client, id string) workflows.SandboxStatus {
	t.Helper()
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout}
	if _, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CancelWorkflow(context.Background(), id, "") })
	return sandboxStatus(t, c, id)
}

// TestShutdownParks: a host shut down (as on SIGTERM) lets a command
// that ends within its stop timeout finish, pauses the sandbox with what
// still runs in it (a longer command, a background loop), noting it in
// the data directory first; started again, the next operation resumes
// the sandbox: the longer command's result comes, from its one run, and
// the loop goes on, having made no progress while the host was down.
func TestShutdownParks(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	data := shortDataDir(t)
	cfg := hostworker.HostConfig{DataDir: data, Providers: []string{"linux"},
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, StopTimeout: 6 * time.Second}
	h, err := hostworker.StartHost(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { h.Close() }()
	const id = "parked"
	sbx := startSandbox(t, c, id).ID
	execIn(t, c, id, workflows.ExecRequest{Shell: loopScript})
	ws := workspace(t, data, sbx)

	type result struct {
		out workflows.RunOutput
		err error
	}
	start := func(script string) chan result {
		done := make(chan result, 1)
		go func() {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateExec,
				Args: []any{workflows.ExecRequest{Shell: script}}, WaitForStage: client.WorkflowUpdateStageCompleted})
			var r result
			if r.err = err; err == nil {
				r.err = h.Get(ctx, &r.out)
			}
			done <- r
		}()
		return done
	}
	short := start("sleep 4; touch short-done; echo short")
	long := start("echo ran >> long-runs; sleep 12; echo long")
	// Both under way in Exec activities, past ExecLocal's window.
	testkit.Eventually(t, "both commands to run in Exec activities", 30*time.Second, func() bool {
		desc, err := c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return false
		}
		n := 0
		for _, a := range desc.PendingActivities {
			if a.GetActivityType().GetName() == "Exec" && a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
				n++
			}
		}
		return n == 2
	})
	if fileSize(filepath.Join(ws, "short-done")) == 0 {
		t.Fatal("the short command ended before the host stopped: the test proves nothing")
	}

	began := time.Now()
	parked, err := h.Shutdown(ctx)
	took := time.Since(began)
	if err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if took > 6*time.Second+10*time.Second {
		t.Errorf("shutdown took %v, with a stop timeout of 6s", took)
	}
	if want := []activities.ParkedRef{{Provider: "linux", ID: sbx}}; fmt.Sprint(parked) != fmt.Sprint(want) {
		t.Errorf("parked %v, want %v", parked, want)
	}
	if b, err := os.ReadFile(filepath.Join(data, hostworker.ParkedFile)); err != nil || !strings.Contains(string(b), sbx) {
		t.Errorf("the parked file: %q, %v; want it to name %s", b, err, sbx)
	}
	if fileSize(filepath.Join(ws, "short-done")) != 0 {
		t.Errorf("the command that ends within the stop timeout did not finish")
	}
	stopped := time.Now()
	size := fileSize(filepath.Join(ws, "loop"))
	time.Sleep(time.Second)
	if now := fileSize(filepath.Join(ws, "loop")); now != size {
		t.Fatalf("the loop went on after the host stopped: %d bytes, then %d", size, now)
	}

	restarted := time.Now()
	if h, err = hostworker.StartHost(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan result{"short": short, "long": long} {
		select {
		case r := <-ch:
			if r.err != nil || string(r.out.Stdout.Inline) != name+"\n" {
				t.Errorf("%s command: %q, %v; want its output", name, r.out.Stdout.Inline, r.err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the %s command's result did not come after the restart", name)
		}
	}
	out := execIn(t, c, id, workflows.ExecRequest{Shell: "cat long-runs; sleep 0.3; cat loop"})
	lines := strings.Fields(string(out.Stdout.Inline))
	if len(lines) < 2 || lines[0] != "ran" || lines[1] == "ran" {
		t.Fatalf("the long command ran %q, want once", lines)
	}
	var gap, last time.Time
	for _, l := range lines[1:] {
		ns, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			continue // a line the pause cut
		}
		at := time.Unix(0, ns)
		if at.After(stopped) && at.Before(restarted) {
			gap = at
		}
		last = at
	}
	if !gap.IsZero() {
		t.Errorf("the loop ran at %v, while the host was down (%v to %v)", gap, stopped, restarted)
	}
	if !last.After(restarted) {
		t.Errorf("the loop's last step at %v, before the restart at %v: it did not go on", last, restarted)
	}
	if b, _ := os.ReadFile(filepath.Join(data, hostworker.ParkedFile)); strings.Contains(string(b), sbx) {
		t.Errorf("the sandbox is still noted parked once resumed: %s", b)
	}
}

// TestReconcileAtStart: a host that starts destroys at once the
// sandboxes whose owner closed while it was down, and keeps those whose
// owner lives.
func TestReconcileAtStart(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	data := shortDataDir(t)
	cfg := hostworker.HostConfig{DataDir: data, Providers: []string{"linux"},
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, ReapEvery: time.Hour}
	h, err := hostworker.StartHost(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed, lives := startSandbox(t, c, "closed").ID, startSandbox(t, c, "lives").ID
	h.Close() // as a crash would: the sandboxes run on
	if err := c.TerminateWorkflow(ctx, "closed", "", "its owner is gone"); err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool { _, err := os.Stat(filepath.Join(data, "linux", id)); return err == nil }
	if !exists(closed) || !exists(lives) {
		t.Fatal("the sandboxes are not on disk")
	}

	if h, err = hostworker.StartHost(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	testkit.Eventually(t, "the sandbox of the closed owner to be destroyed", 30*time.Second, func() bool { return !exists(closed) })
	if out := execIn(t, c, "lives", workflows.ExecRequest{Shell: "echo here"}); string(out.Stdout.Inline) != "here\n" || !exists(lives) {
		t.Errorf("the sandbox whose owner lives: %q", out.Stdout.Inline)
	}
}

// TestParkedHibernates: a sandbox its host paused as it stopped, whose
// hibernate-after passes while the host is down, is hibernated by its
// workflow once the host is back, and its workspace comes back with it.
func TestParkedHibernates(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	data := shortDataDir(t)
	cfg := hostworker.HostConfig{DataDir: data, Providers: []string{"linux"},
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue}
	h, err := hostworker.StartHost(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const id = "hibernates"
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: 2 * time.Second, HibernateAfter: 4 * time.Second}
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CancelWorkflow(context.Background(), id, "") })
	sandboxStatus(t, c, id)
	execIn(t, c, id, workflows.ExecRequest{Shell: "echo kept > kept; " + loopScript})
	parked, err := h.Shutdown(ctx)
	if err != nil || len(parked) != 1 {
		t.Fatalf("shutdown: parked %v, %v; want the sandbox", parked, err)
	}
	down := time.Now()
	testkit.Eventually(t, "hibernate-after to pass", time.Minute, func() bool { return time.Since(down) > 5*time.Second })

	if h, err = hostworker.StartHost(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	testkit.Eventually(t, "the sandbox to hibernate", time.Minute, func() bool {
		v, err := c.QueryWorkflow(ctx, id, "", workflows.QuerySandbox)
		var st workflows.SandboxStatus
		return err == nil && v.Get(&st) == nil && st.State == sandbox.StateHibernated
	})
	if b, _ := os.ReadFile(filepath.Join(data, hostworker.ParkedFile)); strings.Contains(string(b), parked[0].ID) {
		t.Errorf("the hibernated sandbox is still noted parked: %s", b)
	}
	if out := execIn(t, c, id, workflows.ExecRequest{Shell: "cat kept"}); string(out.Stdout.Inline) != "kept\n" {
		t.Errorf("after waking: %q, want the workspace back", out.Stdout.Inline)
	}
}

// TestOrphanedSeconds: a host counts the seconds its sandboxes are held
// with their owner closed: none while the owner lives, time once it is
// terminated (nothing cleans up after a terminated workflow but the
// reaper), and no more once the reaper destroyed the sandbox; its
// metrics say so in Prometheus' text format.
func TestOrphanedSeconds(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	cfg := hostworker.HostConfig{DataDir: shortDataDir(t), Providers: []string{"linux"},
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, OrphanSampling: 100 * time.Millisecond}
	h, err := hostworker.StartHost(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	startSandbox(t, c, "owned")
	since := time.Now()
	testkit.Eventually(t, "a few samples", time.Minute, func() bool { return time.Since(since) > time.Second })
	if s := h.OrphanedSeconds(); s != 0 {
		t.Errorf("%v orphaned seconds with the owner alive, want 0", s)
	}

	if err := c.TerminateWorkflow(ctx, "owned", "", "gone"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "orphaned seconds to be counted", time.Minute, func() bool { return h.OrphanedSeconds() >= 1 })
	rec := httptest.NewRecorder()
	h.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	var v float64
	_, sample, _ := strings.Cut(body, "\nberth_orphaned_sandbox_seconds_total ")
	if _, err := fmt.Sscanf(sample, "%g", &v); err != nil || v < 1 ||
		!strings.Contains(body, "# TYPE berth_orphaned_sandbox_seconds_total counter\n") {
		t.Errorf("metrics:\n%s\nwant the counter, at least 1", body)
	}

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Reaper,
		workflows.ReaperInput{Queue: sandbox.DefaultQueue})
	if err != nil {
		t.Fatal(err)
	}
	var report sandbox.ReapReport
	if err := run.Get(ctx, &report); err != nil || len(report.Sandboxes) != 1 {
		t.Fatalf("reap: %+v, %v; want the orphan destroyed", report, err)
	}
	before := h.OrphanedSeconds()
	since = time.Now()
	testkit.Eventually(t, "a few samples", time.Minute, func() bool { return time.Since(since) > time.Second })
	if after := h.OrphanedSeconds(); after > before+0.5 {
		t.Errorf("orphaned seconds went from %v to %v after the orphan was destroyed", before, after)
	}
}
