package hostworker_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image/imagetest"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// TestSwitch: the berth.switch update moves a standalone sandbox to a
// new sandbox (here of the same provider: the others have tests of their
// own), its workspace along, and keeps serving; a provider no worker
// serves is refused and the sandbox keeps its workspace where it was.
func TestSwitch(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: time.Hour}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "switched", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CancelWorkflow(context.WithoutCancel(ctx), run.GetID(), "")
	before := sandboxStatus(t, c, run.GetID())
	execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "mkdir -p d && echo kept > d/f && chmod 750 d && ln -s d/f link"})

	if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: "linux"}); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	after := sandboxStatus(t, c, run.GetID())
	if after.ID == before.ID || after.Provider != "linux" {
		t.Errorf("after the switch: sandbox %s on %s, want a new one (was %s)", after.ID, after.Provider, before.ID)
	}
	out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "cat link; stat -c %a d"})
	if got := string(out.Stdout.Inline); got != "kept\n750\n" {
		t.Errorf("the workspace after the switch: %q", got)
	}

	err = update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: "nosuch"})
	if temporalerr.KindOf(err) != errdefs.BadInput || !strings.Contains(temporalerr.OneLine(err), "nosuch") {
		t.Fatalf("switch to a provider no worker serves: %v, want bad input naming it", err)
	}
	if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{}); err == nil {
		t.Fatal("switch to no provider was accepted")
	}
	still := sandboxStatus(t, c, run.GetID())
	if still.ID != after.ID {
		t.Errorf("a failed switch changed the sandbox: %s, was %s", still.ID, after.ID)
	}
	if out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "cat d/f"}); string(out.Stdout.Inline) != "kept\n" {
		t.Errorf("the workspace after a failed switch: %q", out.Stdout.Inline)
	}
}

// TestSwitchImage: a switch with an image runs the sandbox on it; one
// without goes to the provider's default image, and the status says
// which image runs.
func TestSwitchImage(t *testing.T) {
	ctx := t.Context()
	c := startBerth(t)
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	image := "oci:" + layout + ":v1"
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: time.Hour}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "switched-image", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CancelWorkflow(context.WithoutCancel(ctx), run.GetID(), "")
	marker := func() string {
		out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "cat " + imagetest.Marker + " 2>/dev/null || echo none"})
		return strings.TrimSpace(string(out.Stdout.Inline))
	}
	if got := marker(); got != "none" {
		t.Fatalf("the default image has the test image's marker: %q", got)
	}
	for _, step := range []struct {
		image string // switched to
		want  bool   // the test image runs
	}{{image, true}, {"", false}} {
		if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: "linux", Image: step.image}); err != nil {
			t.Fatal(temporalerr.OneLine(err))
		}
		st := sandboxStatus(t, c, run.GetID())
		if got := marker(); (got == strings.TrimSpace(imagetest.MarkerData)) != step.want || st.Image != step.image || st.Config.Image != step.image {
			t.Errorf("after a switch to image %q: marker %q, status image %q, config image %q", step.image, got, st.Image, st.Config.Image)
		}
	}
}

// TestSwitchToDefaultImage: a linux sandbox switched to docker without
// an image runs on docker's default image, which the provider made from
// the host's files (before it had one, the switch failed: "no image: the
// spec names none and the docker provider has no default"), its
// workspace along; berth providers then shows nothing amiss of docker.
func TestSwitchToDefaultImage(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	data := shortDataDir(t)
	daemon := buildDaemon(t)
	tag := fmt.Sprintf("berth-host-test-%d:1", time.Now().UnixNano())
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "image", "rm", tag).CombinedOutput(); err != nil {
			t.Errorf("remove the default image: %v %s", err, out)
		}
	})
	h, err := hostworker.StartHost(ctx, c, hostworker.HostConfig{
		DataDir: data, Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Providers: []string{"linux", "docker"},
		ProviderConfig: map[string]provider.Config{
			"linux":  {"pool": "-1"},
			"docker": {"daemon": daemon, "host-image": tag, "pool": "-1"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	in := workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: time.Hour}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "to-default-image", TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox, in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The sandbox goes before the image can.
		c.CancelWorkflow(context.Background(), run.GetID(), "")
		run.Get(context.Background(), nil)
	})
	execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: "echo kept > f"})
	// The image is made in the background from the host's start; the
	// switch's creation waits for it, or fails to be retried.
	if err := update(ctx, c, run.GetID(), workflows.UpdateSwitch, workflows.SwitchRequest{Provider: "docker"}); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	if st := sandboxStatus(t, c, run.GetID()); st.Provider != "docker" {
		t.Fatalf("after the switch: on %s", st.Provider)
	}
	out := execIn(t, c, run.GetID(), workflows.ExecRequest{Shell: `cat f; /usr/bin/python3 -c 'import sys; print(sys.version_info[0])'; test -e /usr/bin/perl || echo no-perl`})
	if got := string(out.Stdout.Inline); got != "kept\n3\nno-perl\n" {
		t.Errorf("on docker's default image: %q (stderr %q)", got, out.Stderr.Inline)
	}
	for _, s := range hostProviders(t, c)[0].Providers {
		if s.Name == "docker" && (!s.Available || s.Note != "") {
			t.Errorf("docker: %+v, want ready, nothing amiss", s)
		}
	}
}
