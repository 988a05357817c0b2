package hostworker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestNetworkNotOffered: a policy the provider cannot enforce is refused
// with Unsupported, in one line: at create, at a live change (which
// leaves the policy as it was), and at a change while hibernated, which
// would otherwise leave the sandbox unable to wake. A malformed policy
// is BadInput before anything runs. The sandbox goes on serving.
func TestNetworkNotOffered(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	allow := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
		workflows.SandboxInput{Provider: "linux", Network: allow})
	if err != nil {
		t.Fatal(err)
	}
	err = run.Get(ctx, nil)
	if temporalerr.KindOf(err) != errdefs.Unsupported || strings.Contains(temporalerr.OneLine(err), "\n") {
		t.Fatalf("a sandbox with a policy linux cannot enforce: %v (kind %s), want one line of Unsupported", err, temporalerr.KindOf(err))
	}

	run, err = c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "net-none", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
		workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CancelWorkflow(context.WithoutCancel(ctx), run.GetID(), "")
	sandboxStatus(t, c, run.GetID())

	bad := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org/simple"}}
	if err := update(ctx, c, run.GetID(), workflows.UpdateNetwork, bad); temporalerr.KindOf(err) != errdefs.BadInput {
		t.Errorf("a malformed policy: %v, want BadInput", err)
	}
	for _, state := range []string{"running", "hibernated"} {
		if state == "hibernated" {
			if err := update(ctx, c, run.GetID(), workflows.UpdateHibernate, nil); err != nil {
				t.Fatal(temporalerr.OneLine(err))
			}
		}
		for _, n := range []provider.Network{allow, {Mode: provider.NetworkOpen}} {
			err := update(ctx, c, run.GetID(), workflows.UpdateNetwork, n)
			if temporalerr.KindOf(err) != errdefs.Unsupported {
				t.Errorf("%s: network %q on linux: %v, want Unsupported", state, n.Mode, err)
			}
		}
		st := sandboxStatus(t, c, run.GetID())
		if st.Network.Mode != provider.NetworkNone || st.Config.Network.Mode != provider.NetworkNone {
			t.Errorf("%s: the policy after refused changes: %+v (config %+v), want none", state, st.Network, st.Config.Network)
		}
	}
	// It wakes, as it was.
	if out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "echo up", Timeout: time.Minute}); string(out.Stdout.Inline) != "up\n" {
		t.Errorf("after the refused changes: %q", out.Stdout.Inline)
	}
}
