package sandbox

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// providerState says what the provider holds for a sandbox id, from the
// test's side.
func providerState(t *testing.T, p provider.Provider, id string) provider.State {
	t.Helper()
	infos, err := p.List(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		if info.ID == id {
			return info.State
		}
	}
	return "gone"
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestIdlePauseAndResume: an idle sandbox is frozen by the provider, and
// the next command thaws it with its files and processes as they were.
func TestIdlePauseAndResume(t *testing.T) {
	env, p, _ := berthtest.WorkflowEnv(t)
	var id string
	var seen provider.State
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(time.Minute), WithHibernateAfter(NoIdleTimeout))
		if err != nil {
			return "", err
		}
		defer sbx.Stop(ctx)
		id = sbx.ID()
		if _, err := sbx.Exec(ctx, "echo kept > f; sleep 1000 > /dev/null 2>&1 & echo $! > pid"); err != nil {
			return "", err
		}
		if err := workflow.Sleep(ctx, 2*time.Minute); err != nil {
			return "", err
		}
		if sbx.State() != StatePaused {
			return "", errors.New("not paused after two idle minutes: " + string(sbx.State()))
		}
		seen = providerState(t, p, id)
		res, err := sbx.Exec(ctx, "cat f; kill -0 $(cat pid) && echo alive")
		if sbx.State() != StateRunning {
			return "", errors.New("not running after a command: " + string(sbx.State()))
		}
		return res.Stdout, err
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var out string
	must(t, env.GetWorkflowResult(&out))
	if seen != provider.StatePaused {
		t.Errorf("the provider saw the idle sandbox %s, want paused", seen)
	}
	if out != "kept\nalive\n" {
		t.Errorf("after resume: %q, want the file and the process kept", out)
	}
	if st := providerState(t, p, id); st != "gone" {
		t.Errorf("after Stop the sandbox is %s", st)
	}
}

// TestHibernateAndWake: a sandbox idle for longer is checkpointed and
// destroyed (nothing of it is left at the provider), and the next
// command re-creates it with its files; its processes are gone.
func TestHibernateAndWake(t *testing.T) {
	env, p, _ := berthtest.WorkflowEnv(t)
	var ids []string
	var during provider.State
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(time.Minute), WithHibernateAfter(3*time.Minute))
		if err != nil {
			return "", err
		}
		defer sbx.Stop(ctx)
		ids = append(ids, sbx.ID())
		if _, err := sbx.Exec(ctx, "mkdir -p d && echo kept > d/f && ln -s d/f link; sleep 1000 > /dev/null 2>&1 &"); err != nil {
			return "", err
		}
		if err := workflow.Sleep(ctx, 5*time.Minute); err != nil {
			return "", err
		}
		if sbx.State() != StateHibernated {
			return "", errors.New("not hibernated: " + string(sbx.State()))
		}
		during = providerState(t, p, ids[0])
		res, err := sbx.Exec(ctx, "cat link; pgrep -x sleep || echo no-sleep")
		ids = append(ids, sbx.ID())
		return res.Stdout, err
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var out string
	must(t, env.GetWorkflowResult(&out))
	if during != "gone" {
		t.Errorf("hibernated sandbox is %s at the provider, want gone", during)
	}
	if out != "kept\nno-sleep\n" {
		t.Errorf("after waking: %q", out)
	}
	if len(ids) != 2 || ids[1] != ids[0]+"-2" {
		t.Errorf("ids %v: want the woken sandbox to be the second generation", ids)
	}
	if infos, _ := p.List(t.Context(), nil); len(infos) != 0 {
		t.Errorf("left behind: %v", infos)
	}
}

// TestCommandRacesIdlePause: a command that arrives while the idle pause
// is in flight waits for it, resumes the sandbox, and runs once.
func TestCommandRacesIdlePause(t *testing.T) {
	env, _, _ := berthtest.WorkflowEnv(t)
	wf := func(ctx workflow.Context) ([]string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(time.Minute), WithHibernateAfter(NoIdleTimeout))
		if err != nil {
			return nil, err
		}
		defer sbx.Stop(ctx)
		// Wake exactly when the idle watcher has started pausing.
		if err := workflow.Await(ctx, func() bool { return sbx.st.busy }); err != nil {
			return nil, err
		}
		var states []string
		states = append(states, string(sbx.State()))
		res, err := sbx.Exec(ctx, "echo ran >> log; cat log")
		if err != nil {
			return nil, err
		}
		return append(states, string(sbx.State()), res.Stdout), nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var got []string
	must(t, env.GetWorkflowResult(&got))
	want := []string{"running", "running", "ran\n"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q (the pause in flight, then the command on a resumed sandbox, once)", got, want)
	}
}

// TestRecoverLost: a sandbox killed from outside is re-created from its
// last checkpoint by the next operation, which says what was lost.
func TestRecoverLost(t *testing.T) {
	env, _, _ := berthtest.WorkflowEnv(t)
	type report struct {
		Lost      []string
		Recovered bool
		Files     string
		Old, New  string
	}
	wf := func(ctx workflow.Context) (report, error) {
		var r report
		sbx, err := New(ctx, Provider{Name: "linux"}, WithCheckpointEvery(2), WithIdleTimeout(NoIdleTimeout), WithHibernateAfter(NoIdleTimeout))
		if err != nil {
			return r, err
		}
		defer sbx.Stop(ctx)
		r.Old = sbx.ID()
		if err := sbx.WriteFiles(ctx, provider.File{Path: "a", Data: []byte("a")}); err != nil {
			return r, err
		}
		if _, err := sbx.Exec(ctx, "echo b > b"); err != nil { // the second mutation: a checkpoint
			return r, err
		}
		if _, err := sbx.Exec(ctx, "echo c > c"); err != nil { // after the checkpoint: lost
			return r, err
		}
		// Killed from outside between two operations.
		if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx,
			workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute}),
			func() error { berthtest.KillSandbox(t, r.Old); return nil }).Get(ctx, nil); err != nil {
			return r, err
		}
		_, err = sbx.Exec(ctx, "true")
		var lost *LostError
		if !errors.As(err, &lost) || !errors.Is(err, errdefs.ErrSandboxLost) {
			return r, errors.New("want a LostError, got " + errString(err))
		}
		r.Lost, r.Recovered = lost.Lost, lost.Recovered
		res, err := sbx.Exec(ctx, "ls | tr '\\n' ' '")
		if err != nil {
			return r, err
		}
		r.Files, r.New = res.Stdout, sbx.ID()
		return r, nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var r report
	must(t, env.GetWorkflowResult(&r))
	if !r.Recovered || !slices.Equal(r.Lost, []string{"exec echo c > c"}) {
		t.Errorf("recovered %v, lost %q; want recovered, losing the one command after the checkpoint", r.Recovered, r.Lost)
	}
	if r.Files != "a b " {
		t.Errorf("recovered workspace: %q, want the files up to the checkpoint", r.Files)
	}
	if r.New == r.Old {
		t.Errorf("recovered into the same sandbox id %s", r.New)
	}
}

// TestRecoveryFail: under WithRecovery(Fail) a lost sandbox stays lost.
func TestRecoveryFail(t *testing.T) {
	env, _, _ := berthtest.WorkflowEnv(t)
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithRecovery(Fail), WithIdleTimeout(NoIdleTimeout), WithHibernateAfter(NoIdleTimeout))
		if err != nil {
			return "", err
		}
		defer sbx.Stop(ctx)
		id := sbx.ID()
		if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx,
			workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute}),
			func() error { berthtest.KillSandbox(t, id); return nil }).Get(ctx, nil); err != nil {
			return "", err
		}
		var msgs []string
		for range 2 {
			_, err := sbx.Exec(ctx, "true")
			if !errors.Is(err, errdefs.ErrSandboxLost) {
				return "", errors.New("want ErrLost, got " + errString(err))
			}
			msgs = append(msgs, err.Error())
		}
		return strings.Join(msgs, "\n") + "\n" + string(sbx.State()), nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var out string
	must(t, env.GetWorkflowResult(&out))
	if !strings.HasSuffix(out, "lost") || !strings.Contains(out, "not recovered") {
		t.Errorf("got %q", out)
	}
}

// TestForkDiverges: a fork starts as a copy and then lives its own life.
func TestForkDiverges(t *testing.T) {
	env, _, _ := berthtest.WorkflowEnv(t)
	wf := func(ctx workflow.Context) ([]string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"})
		if err != nil {
			return nil, err
		}
		defer sbx.Stop(ctx)
		if _, err := sbx.Exec(ctx, "echo shared > shared"); err != nil {
			return nil, err
		}
		fork, err := sbx.Fork(ctx)
		if err != nil {
			return nil, err
		}
		defer fork.Stop(ctx)
		if _, err := sbx.Exec(ctx, "echo mine > original"); err != nil {
			return nil, err
		}
		if _, err := fork.Exec(ctx, "echo theirs > forked"); err != nil {
			return nil, err
		}
		var out []string
		for _, s := range []*Sandbox{sbx, fork} {
			res, err := s.Exec(ctx, "ls | tr '\\n' ' '")
			if err != nil {
				return nil, err
			}
			out = append(out, res.Stdout)
		}
		return out, nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var out []string
	must(t, env.GetWorkflowResult(&out))
	if want := []string{"original shared ", "forked shared "}; !slices.Equal(out, want) {
		t.Errorf("got %q, want %q", out, want)
	}
}

// TestSwitchProvider moves a workspace to another provider (here a
// second linux provider, on its own state directory), keeping the handle.
func TestSwitchProvider(t *testing.T) {
	other := berthtest.Provider(t)
	env, acts := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": berthtest.Provider(t), "other": other})
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := New(ctx, Provider{Name: "linux"})
		if err != nil {
			return "", err
		}
		defer sbx.Stop(ctx)
		if err := sbx.WriteFiles(ctx, provider.File{Path: "src/x.py", Data: []byte("print(1)"), Mode: 0o755}); err != nil {
			return "", err
		}
		if err := sbx.Switch(ctx, Provider{Name: "other"}); err != nil {
			return "", err
		}
		res, err := sbx.Exec(ctx, "stat -c %a src/x.py; cat src/x.py")
		return sbx.Ref().Provider + " " + res.Stdout, err
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var out string
	must(t, env.GetWorkflowResult(&out))
	if out != "other 755\nprint(1)" {
		t.Errorf("after the switch: %q", out)
	}
	if infos, _ := acts.Providers["linux"].List(t.Context(), nil); len(infos) != 0 {
		t.Errorf("the old provider still holds %v", infos)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestCarryAcrossRuns: a handle carried to another run (continue-as-new)
// drives the same sandbox, and the run it left does not destroy it.
func TestCarryAcrossRuns(t *testing.T) {
	p := berthtest.Provider(t)
	providers := map[string]provider.Provider{"linux": p}
	first, _ := berthtest.WorkflowEnvWith(t, providers)
	wf1 := func(ctx workflow.Context) (HandleState, error) {
		sbx, err := New(ctx, Provider{Name: "linux"})
		if err != nil {
			return HandleState{}, err
		}
		defer sbx.Stop(ctx) // must do nothing once carried
		if _, err := sbx.Exec(ctx, "echo carried > f"); err != nil {
			return HandleState{}, err
		}
		return sbx.Carry(), nil
	}
	first.RegisterWorkflow(wf1)
	first.ExecuteWorkflow(wf1)
	var c HandleState
	must(t, first.GetWorkflowResult(&c))

	second, _ := berthtest.WorkflowEnvWith(t, providers)
	wf2 := func(ctx workflow.Context, c HandleState) (string, error) {
		sbx := Reattach(ctx, c)
		defer sbx.Stop(ctx)
		res, err := sbx.Exec(ctx, "cat f")
		return res.ID + " " + res.Stdout, err
	}
	second.RegisterWorkflow(wf2)
	second.ExecuteWorkflow(wf2, c)
	var out string
	must(t, second.GetWorkflowResult(&out))
	if want := c.State.Ref.ID + "-c2 carried\n"; out != want {
		t.Errorf("after the carry: %q, want %q (same sandbox, command ids going on)", out, want)
	}
	if infos, _ := p.List(t.Context(), nil); len(infos) != 0 {
		t.Errorf("left behind: %v", infos)
	}
}

// TestHeldAndActive: a sandbox is held while running or paused, not
// while hibernated, and the count goes on across a wake and a carry to
// another run.
func TestHeldAndActive(t *testing.T) {
	p := berthtest.Provider(t)
	providers := map[string]provider.Provider{"linux": p}
	first, _ := berthtest.WorkflowEnvWith(t, providers)
	type report struct {
		Hibernated, Woken Status
		Carried           HandleState
	}
	wf1 := func(ctx workflow.Context) (r report, err error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithIdleTimeout(time.Minute), WithHibernateAfter(3*time.Minute))
		if err != nil {
			return r, err
		}
		defer sbx.Stop(ctx)
		if _, err := sbx.Exec(ctx, "true"); err != nil {
			return r, err
		}
		if err := workflow.Sleep(ctx, 10*time.Minute); err != nil {
			return r, err
		}
		r.Hibernated = sbx.Status()
		if _, err := sbx.Exec(ctx, "true"); err != nil {
			return r, err
		}
		r.Woken = sbx.Status()
		r.Carried = sbx.Carry()
		return r, nil
	}
	first.RegisterWorkflow(wf1)
	first.ExecuteWorkflow(wf1)
	var r report
	must(t, first.GetWorkflowResult(&r))
	h := r.Hibernated
	// Running a minute, then paused two, then hibernated: three minutes,
	// give or take the time the pause and hibernation took.
	if h.State != StateHibernated || !h.HeldSince.IsZero() || h.Held < 3*time.Minute || h.Held > 4*time.Minute {
		t.Errorf("hibernated: state %s, held %v since %v; want held about 3m and not now", h.State, h.Held, h.HeldSince)
	}
	if !h.ActiveSince.IsZero() || h.Active > h.Held {
		t.Errorf("hibernated: active %v since %v, held %v", h.Active, h.ActiveSince, h.Held)
	}
	w := r.Woken
	if w.HeldSince.IsZero() || w.Held != h.Held || w.Active < h.Active {
		t.Errorf("woken: held %v since %v, active %v; want held %v until a new stretch", w.Held, w.HeldSince, w.Active, h.Held)
	}

	second, _ := berthtest.WorkflowEnvWith(t, providers)
	wf2 := func(ctx workflow.Context, c HandleState) (Status, error) {
		sbx := Reattach(ctx, c)
		defer sbx.Stop(ctx)
		return sbx.Status(), nil
	}
	second.RegisterWorkflow(wf2)
	second.ExecuteWorkflow(wf2, r.Carried)
	var after Status
	must(t, second.GetWorkflowResult(&after))
	if after.Held != w.Held || !after.HeldSince.Equal(w.HeldSince) || after.Active != w.Active {
		t.Errorf("after the carry: held %v since %v, active %v; want %v since %v, %v", after.Held, after.HeldSince, after.Active, w.Held, w.HeldSince, w.Active)
	}
}
