package sandbox

import (
	"context"
	"errors"
	"testing"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// TestForkAndSwitchInherit: a fork, and a sandbox switched to another
// provider, keep the parent's limits and environment: a 256 MiB parent's
// fork cannot allocate 400 MiB. ForkWith changes what it is told to.
func TestForkAndSwitchInherit(t *testing.T) {
	env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": berthtest.Provider(t), "other": berthtest.Provider(t)})
	const limit = 256 << 20
	type report struct {
		Fork, Switched, Overridden provider.Resources
		ForkEnv, SwitchedEnv       string
		ForkOOM, SwitchedOOM       bool
	}
	alloc := []string{"/usr/bin/python3", "-c", "b = bytearray(400 << 20); b[::4096] = b'x' * len(b[::4096])"}
	wf := func(ctx workflow.Context) (r report, err error) {
		sbx, err := New(ctx, Provider{Name: "linux"}, WithResources(provider.Resources{Memory: limit}),
			WithEnv(map[string]string{"FROM": "parent"}))
		if err != nil {
			return r, err
		}
		defer sbx.Stop(ctx)
		fork, err := sbx.Fork(ctx)
		if err != nil {
			return r, err
		}
		defer fork.Stop(ctx)
		r.Fork = fork.Status().Resources
		res, err := fork.Exec(ctx, "echo $FROM")
		if err != nil {
			return r, err
		}
		r.ForkEnv = res.Stdout
		_, err = fork.ExecArgv(ctx, alloc)
		r.ForkOOM = errors.Is(err, errdefs.ErrOutOfMemory)

		bigger, err := sbx.ForkWith(ctx, Provider{}, WithResources(provider.Resources{Memory: 2 * limit}))
		if err != nil {
			return r, err
		}
		defer bigger.Stop(ctx)
		r.Overridden = bigger.Status().Resources

		if err := sbx.Switch(ctx, Provider{Name: "other"}); err != nil {
			return r, err
		}
		r.Switched = sbx.Status().Resources
		if res, err = sbx.Exec(ctx, "echo $FROM"); err != nil {
			return r, err
		}
		r.SwitchedEnv = res.Stdout
		_, err = sbx.ExecArgv(ctx, alloc)
		r.SwitchedOOM = errors.Is(err, errdefs.ErrOutOfMemory)
		return r, nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var r report
	must(t, env.GetWorkflowResult(&r))
	if r.Fork.Memory != limit || r.Switched.Memory != limit {
		t.Errorf("memory limits: fork %d, switched %d; want %d", r.Fork.Memory, r.Switched.Memory, limit)
	}
	if !r.ForkOOM || !r.SwitchedOOM {
		t.Errorf("400 MiB allocated under a 256 MiB limit: fork OOM %v, switched OOM %v", r.ForkOOM, r.SwitchedOOM)
	}
	if r.ForkEnv != "parent\n" || r.SwitchedEnv != "parent\n" {
		t.Errorf("environment: fork %q, switched %q; want the parent's", r.ForkEnv, r.SwitchedEnv)
	}
	if r.Overridden.Memory != 2*limit {
		t.Errorf("ForkWith a new limit: %d, want %d", r.Overridden.Memory, 2*limit)
	}
}

// TestNewRejectsBadSettings: settings no sandbox can start under fail as
// bad input before any activity.
func TestNewRejectsBadSettings(t *testing.T) {
	env, _ := berthtest.WorkflowEnvWith(t, map[string]provider.Provider{"linux": berthtest.Provider(t)})
	activities := 0
	env.SetOnActivityStartedListener(func(*activity.Info, context.Context, converter.EncodedValues) { activities++ })
	wf := func(ctx workflow.Context) error {
		_, err := New(ctx, Provider{Name: "linux"}, WithResources(provider.Resources{Memory: 1 << 20}))
		return Failure(err)
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	if err := env.GetWorkflowError(); temporalerr.KindOf(err) != errdefs.BadInput {
		t.Errorf("1 MiB of memory: %v, want bad input", err)
	}
	if activities != 0 {
		t.Errorf("%d activities ran", activities)
	}
}
