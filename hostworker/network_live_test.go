package hostworker_test

import (
	"context"
	"os"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/errdefs/temporalerr"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/workflows"
)

// TestNetworkThroughWorkflows drives a sandbox's network policy through
// its workflow, on a linux provider whose sandboxes' networks go into a
// contained test topology (no route out of it): the policy it was made
// with holds, the berth.network Update changes it live, and hibernation,
// the wake after it, and a fork keep the policy now in force. Each check
// is a connection from inside the sandbox, which the kernel's rules let
// through or drop.
func TestNetworkThroughWorkflows(t *testing.T) {
	ctx := t.Context()
	tp := nettest.New(t)
	proxy := tp.StartProxy(15001)
	dir, err := os.MkdirTemp("", "berth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	p, err := linux.New(linux.Config{StateDir: dir, Pool: -1,
		Network: linux.NetworkConfig{ProxyAddr: proxy.Addr, Uplink: tp.Uplink, Resolver: tp.Resolver()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { berthtest.DestroyAll(t, p) })
	c := server(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p},
		Outputs:   berthtest.Bucket(t), Snapshots: snapshot.New(berthtest.Bucket(t)),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	only := func(a interface{ String() string }) provider.Network {
		return provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{a.String()}}
	}
	pypi, evil := nettest.PyPIAddr.String(), nettest.EvilAddr.String()
	reaches := func(id, addr string) bool {
		t.Helper()
		out := execIn(t, c, id, workflows.ExecRequest{Timeout: time.Minute, Argv: []string{"/usr/bin/python3", "-c",
			"import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], 80), timeout=3).close()\nexcept OSError:\n    sys.exit(7)",
			addr}})
		if out.ExitCode != 0 && out.ExitCode != 7 {
			t.Fatalf("the probe in %s failed: exit %d: %s", id, out.ExitCode, out.Stderr.Inline)
		}
		return out.ExitCode == 0
	}
	expect := func(what, id string, wantPyPI, wantEvil bool) {
		t.Helper()
		if got := reaches(id, pypi); got != wantPyPI {
			t.Errorf("%s: %s reaches pypi: %v, want %v", what, id, got, wantPyPI)
		}
		if got := reaches(id, evil); got != wantEvil {
			t.Errorf("%s: %s reaches evil: %v, want %v", what, id, got, wantEvil)
		}
	}

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "net-live", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
		workflows.SandboxInput{Provider: "linux", Network: only(nettest.PyPIAddr),
			IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{run.GetID(), "net-fork"} {
		defer c.CancelWorkflow(context.WithoutCancel(ctx), id, "")
	}
	sandboxStatus(t, c, run.GetID())
	expect("as made", run.GetID(), true, false)

	if err := update(ctx, c, run.GetID(), workflows.UpdateNetwork, only(nettest.EvilAddr)); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	expect("changed live", run.GetID(), false, true)
	if st := sandboxStatus(t, c, run.GetID()); st.Network.CIDRs[0] != evil || st.Config.Network.CIDRs[0] != evil {
		t.Errorf("the status after the change: %+v (config %+v)", st.Network, st.Config.Network)
	}

	if err := update(ctx, c, run.GetID(), workflows.UpdateHibernate, nil); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	expect("woken from hibernation", run.GetID(), false, true)

	if err := update(ctx, c, run.GetID(), workflows.UpdateFork, workflows.ForkRequest{ID: "net-fork"}); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	sandboxStatus(t, c, "net-fork")
	expect("the fork", "net-fork", false, true)

	if err := update(ctx, c, run.GetID(), workflows.UpdateNetwork, provider.Network{}); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	expect("changed to none", run.GetID(), false, false)
	expect("the fork, after its parent's change", "net-fork", false, true)
}
