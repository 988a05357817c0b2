package hostworker_test

import (
	"context"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// sandboxStatus waits until a Sandbox workflow has its sandbox, and
// returns its status.
func sandboxStatus(t testing.TB, c client.Client, id string) workflows.SandboxStatus {
	t.Helper()
	var st workflows.SandboxStatus
	testkit.Eventually(t, "sandbox "+id+" to be created", 30*time.Second, func() bool {
		v, err := c.QueryWorkflow(t.Context(), id, "", workflows.QuerySandbox)
		return err == nil && v.Get(&st) == nil && st.ID != ""
	})
	return st
}

func execIn(t testing.TB, c client.Client, id string, req workflows.ExecRequest) workflows.RunOutput {
	t.Helper()
	h, err := c.UpdateWorkflow(t.Context(), client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.UpdateExec,
		Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted})
	var out workflows.RunOutput
	if err == nil {
		err = h.Get(t.Context(), &out)
	}
	if err != nil {
		t.Fatalf("exec in %s: %s", id, temporalerr.OneLine(err))
	}
	return out
}

// TestForkInherits: the berth.fork update makes a sandbox with its
// parent's settings: a fork of a sandbox limited to 256 MiB is limited
// to 256 MiB, has its environment and its labels (not its owner's), and
// changes what the request overrides.
func TestForkInherits(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	const limit = 256 << 20
	parent := workflows.SandboxInput{Provider: "linux", Resources: provider.Resources{Memory: limit},
		Env: map[string]string{"FROM": "parent"}, Labels: map[string]string{"team": "a"},
		IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: time.Hour}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "parent", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{run.GetID(), "fork", "fork2"} {
		defer c.CancelWorkflow(context.WithoutCancel(ctx), id, "")
	}
	sandboxStatus(t, c, run.GetID())
	if err := update(ctx, c, run.GetID(), workflows.UpdateFork, workflows.ForkRequest{ID: "fork"}); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	st := sandboxStatus(t, c, "fork")
	if st.Resources.Memory != limit || st.Config.Resources.Memory != limit {
		t.Errorf("the fork's memory limit: %d (config %d), want %d", st.Resources.Memory, st.Config.Resources.Memory, limit)
	}
	if st.Config.Env["FROM"] != "parent" || st.Config.Labels["team"] != "a" || st.Config.IdleTimeout != sandbox.NoIdleTimeout || st.Config.HibernateAfter != time.Hour {
		t.Errorf("the fork's settings: %+v, want the parent's", st.Config)
	}
	if out := execIn(t, c, "fork", workflows.ExecRequest{Shell: "echo $FROM"}); string(out.Stdout.Inline) != "parent\n" {
		t.Errorf("the fork's environment: FROM=%q", out.Stdout.Inline)
	}
	out := execIn(t, c, "fork", workflows.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", "b = bytearray(400 << 20); b[::4096] = b'x' * len(b[::4096])"}})
	if out.Kind != errdefs.OutOfMemory {
		t.Errorf("400 MiB in the fork of a 256 MiB sandbox: kind %q exit %d, want %s", out.Kind, out.ExitCode, errdefs.OutOfMemory)
	}

	// Overrides.
	err = update(ctx, c, run.GetID(), workflows.UpdateFork, workflows.ForkRequest{ID: "fork2",
		Resources: provider.Resources{Memory: 2 * limit}, Env: map[string]string{"EXTRA": "1"}})
	if err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	st = sandboxStatus(t, c, "fork2")
	if st.Resources.Memory != 2*limit || st.Config.Env["FROM"] != "parent" || st.Config.Env["EXTRA"] != "1" {
		t.Errorf("fork with overrides: memory %d env %v; want %d and both variables", st.Resources.Memory, st.Config.Env, 2*limit)
	}
}

// TestCreateExisting: creating a sandbox under an id in use is a no-op
// with the same settings, and AlreadyExists with others.
func TestCreateExisting(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	in := workflows.SandboxInput{Provider: "linux", Resources: provider.Resources{Memory: 256 << 20}}
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "named", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in); err != nil {
		t.Fatal(err)
	}
	defer c.CancelWorkflow(context.WithoutCancel(ctx), "named", "")
	if err := workflows.CheckExisting(ctx, c, "named", in); err != nil {
		t.Errorf("same settings: %v", err)
	}
	other := in
	other.Resources.Memory = 512 << 20
	err := workflows.CheckExisting(ctx, c, "named", other)
	checkOneLine(t, err, errdefs.AlreadyExists, "other settings")
}
