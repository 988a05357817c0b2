package hostworker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// twoHosts are the configurations of hosts berth@a and berth@b on one
// server, each with a data directory of its own, sharing one blob store
// (as an s3:// bucket would be shared).
func twoHosts(t *testing.T, wfs ...any) map[string]hostworker.HostConfig {
	t.Helper()
	blob := "file://" + shortDataDir(t)
	cfgs := map[string]hostworker.HostConfig{}
	for _, name := range []string{"a", "b"} {
		cfgs["berth@"+name] = hostworker.HostConfig{
			DataDir: shortDataDir(t), Blob: blob, Providers: []string{"linux"},
			Queue: sandbox.DefaultQueue, HostQueue: "berth@" + name, ReapEvery: time.Hour,
			StopTimeout: 10 * time.Second, Workflows: wfs,
		}
	}
	return cfgs
}

func startHost(t *testing.T, c client.Client, cfg hostworker.HostConfig) *hostworker.Host {
	t.Helper()
	h, err := hostworker.StartHost(t.Context(), c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// held says whether the host of cfg holds sandbox id.
func held(cfg hostworker.HostConfig, id string) bool {
	_, err := os.Stat(filepath.Join(cfg.DataDir, "linux", id))
	return err == nil
}

// TestRollingRestart: two hosts with standalone sandboxes on both, each
// with a file in its workspace; one host is stopped (as on SIGTERM),
// started again, then the other. Stopping, a host hibernates its idle
// sandboxes (it parks none), lets the command under way in another
// finish, and its sandboxes wake on the other host; nothing is lost: every
// sandbox answers after each step, with its file, and the command's
// result comes, from its one run.
func TestRollingRestart(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	cfgs := twoHosts(t)
	hosts := map[string]*hostworker.Host{}
	for q, cfg := range cfgs {
		hosts[q] = startHost(t, c, cfg)
	}
	waitPolled(t, c, 2)
	ids := []string{"roll-1", "roll-2", "roll-3", "roll-4"}
	on := map[string]string{} // sandbox -> host queue
	for _, id := range ids {
		startSandbox(t, c, id)
		execIn(t, c, id, workflows.ExecRequest{Shell: "echo " + id + " > kept"})
	}
	where := func(id string) string {
		st := sandboxStatus(t, c, id)
		for q, cfg := range cfgs {
			if held(cfg, st.ID) {
				return q
			}
		}
		return ""
	}
	for _, id := range ids {
		on[id] = where(id)
	}
	if n := countBy([]string{on[ids[0]], on[ids[1]], on[ids[2]], on[ids[3]]}); n["berth@a"] != 2 || n["berth@b"] != 2 {
		t.Fatalf("4 sandboxes on two hosts: %v; want 2 on each", n)
	}
	check := func(step string) {
		t.Helper()
		for _, id := range ids {
			out := execIn(t, c, id, workflows.ExecRequest{Shell: "cat kept"})
			if got := string(out.Stdout.Inline); got != id+"\n" {
				t.Errorf("%s: sandbox %s's file: %q, want %q", step, id, got, id+"\n")
			}
		}
	}

	var busied []string
	for _, q := range []string{"berth@a", "berth@b"} {
		other := "berth@b"
		if q == other {
			other = "berth@a"
		}
		// A command under way in one of the host's sandboxes as it stops.
		var busy string
		for _, id := range ids {
			if where(id) == q {
				busy = id
				break
			}
		}
		done := make(chan error, 1)
		go func() {
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: busy, UpdateName: workflows.UpdateExec,
				Args: []any{workflows.ExecRequest{Shell: "echo ran >> runs; sleep 3; echo finished"}}, WaitForStage: client.WorkflowUpdateStageCompleted})
			var out workflows.RunOutput
			if err == nil {
				if err = h.Get(ctx, &out); err == nil && string(out.Stdout.Inline) != "finished\n" {
					err = errors.New("output " + string(out.Stdout.Inline))
				}
			}
			done <- err
		}()
		testkit.Eventually(t, "the command to run", 30*time.Second, func() bool {
			return len(sandboxStatus(t, c, busy).Running) == 1
		})
		parked, err := hosts[q].Shutdown(ctx)
		if err != nil {
			t.Fatalf("stop %s: %v", q, err)
		}
		if err := <-done; err != nil {
			t.Errorf("the command under way as %s stopped: %v", q, err)
		}
		if len(parked) > 0 {
			t.Errorf("%s parked %v; want its sandboxes hibernated, the busy one once its command ended", q, parked)
		}
		for _, id := range ids {
			if st := sandboxStatus(t, c, id); on[id] == q && st.State != sandbox.StateHibernated {
				t.Errorf("after %s stopped, its sandbox %s is %s; want hibernated", q, id, st.State)
			}
		}
		check(q + " stopped")
		for _, id := range ids {
			if w := where(id); w != other {
				t.Errorf("after %s stopped, sandbox %s is on %q; want on %s", q, id, w, other)
			}
		}
		busied = append(busied, busy)
		hosts[q] = startHost(t, c, cfgs[q])
		waitPolled(t, c, 2)
		check(q + " restarted")
		for _, id := range ids {
			on[id] = where(id)
		}
	}
	for id, n := range countBy(busied) {
		want := strings.Repeat("ran\n", n)
		if out := execIn(t, c, id, workflows.ExecRequest{Shell: "cat runs"}); string(out.Stdout.Inline) != want {
			t.Errorf("the commands under way in %s as its host stopped (%d) ran %q; want each once", id, n, out.Stdout.Inline)
		}
	}
}

// hostReturns writes a checkpointed file, answers the query "where"
// with its sandbox's id and queue, runs a command at each "exec" signal
// and reports it at the query "last", until "done".
func hostReturns(ctx workflow.Context) error {
	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"}, sandbox.WithHostTimeout(3*time.Second),
		sandbox.WithCheckpointEvery(1), sandbox.WithIdleTimeout(sandbox.NoIdleTimeout), sandbox.WithHibernateAfter(sandbox.NoIdleTimeout))
	if err != nil {
		return err
	}
	defer sbx.Stop(ctx)
	if err := sbx.WriteFiles(ctx, provider.File{Path: "kept", Data: []byte("kept\n")}); err != nil {
		return err
	}
	var last string
	if err := workflow.SetQueryHandler(ctx, "where", func() ([]string, error) {
		return []string{sbx.ID(), sbx.Ref().Queue, last}, nil
	}); err != nil {
		return err
	}
	execs, done := workflow.GetSignalChannel(ctx, "exec"), workflow.GetSignalChannel(ctx, "done")
	for {
		var cmd string
		stop := false
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(execs, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &cmd) })
		sel.AddReceive(done, func(c workflow.ReceiveChannel, _ bool) { stop = true })
		sel.Select(ctx)
		if stop {
			return nil
		}
		res, err := sbx.Exec(ctx, cmd)
		last = res.Stdout
		if err != nil {
			last = "error: " + err.Error()
		}
	}
}

// TestHostReturns: host A holds sandbox S when its worker dies (its
// sandbox runs on); S moves to host B at its next command; A starts
// again. The old copy of S on A, which its workflow no longer uses, is
// destroyed by A's first reaper pass, at its start, and S goes on on B:
// never two copies answering.
func TestHostReturns(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	cfgs := twoHosts(t, hostReturns)
	hosts := map[string]*hostworker.Host{}
	for q, cfg := range cfgs {
		hosts[q] = startHost(t, c, cfg)
	}
	waitPolled(t, c, 2)
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, hostReturns)
	if err != nil {
		t.Fatal(err)
	}
	defer c.SignalWorkflow(context.Background(), run.GetID(), "", "done", nil)
	where := func() []string {
		var w []string
		testkit.Eventually(t, "the sandbox's whereabouts", 30*time.Second, func() bool {
			v, err := c.QueryWorkflow(ctx, run.GetID(), "", "where")
			return err == nil && v.Get(&w) == nil && len(w) == 3
		})
		return w
	}
	exec := func(cmd string) []string {
		before := where()[2]
		if err := c.SignalWorkflow(ctx, run.GetID(), "", "exec", cmd+"; echo $RANDOM$RANDOM"); err != nil {
			t.Fatal(err)
		}
		var w []string
		testkit.Eventually(t, "the command "+cmd, time.Minute, func() bool { w = where(); return w[2] != before })
		return w
	}
	first := exec("cat kept")
	old, a := first[0], first[1]
	b := "berth@a"
	if a == b {
		b = "berth@b"
	}
	if !held(cfgs[a], old) {
		t.Fatalf("sandbox %s is not on %s", old, a)
	}
	hosts[a].Close() // as a crash: the sandbox runs on
	moved := exec("cat kept")
	if moved[0] == old || moved[1] != b || !held(cfgs[b], moved[0]) {
		t.Fatalf("after %s died: the sandbox is %s on %s; want a new one on %s", a, moved[0], moved[1], b)
	}
	// The workflow's own attempt to destroy the old copy gave up on the
	// host that is down: what destroys it is the host, as it comes back.
	testkit.Eventually(t, "the workflow to give up destroying the old copy", time.Minute, func() bool {
		desc, err := c.DescribeWorkflowExecution(ctx, run.GetID(), "")
		return err == nil && len(desc.PendingActivities) == 0
	})
	if !held(cfgs[a], old) {
		t.Fatalf("the old copy %s left %s while it was down: the test proves nothing", old, a)
	}
	hosts[a] = startHost(t, c, cfgs[a])
	testkit.Eventually(t, "the old copy on the host that came back to be destroyed", 30*time.Second, func() bool {
		return !held(cfgs[a], old)
	})
	again := exec("cat kept")
	if again[0] != moved[0] || again[1] != b || len(again[2]) < 5 || again[2][:5] != "kept\n" {
		t.Errorf("after %s came back: %q; want the sandbox on %s, its file kept", a, again, b)
	}
}
