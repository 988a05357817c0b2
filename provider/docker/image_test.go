package docker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/provider"
)

// derivedImage makes image ref, unless it exists, from the test image:
// cmd run in a container of it, committed with cfg (Docker merges it
// with the container's own) and Dockerfile-like changes.
func derivedImage(t *testing.T, p *Provider, ref string, cmd []string, cfg *container.Config, changes ...string) {
	t.Helper()
	if _, err := p.docker.ImageInspect(t.Context(), ref); err == nil {
		return
	}
	base, err := p.docker.ContainerCreate(t.Context(), client.ContainerCreateOptions{Image: testImage,
		Config: &container.Config{Cmd: cmd}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.docker.ContainerRemove(context.Background(), base.ID, client.ContainerRemoveOptions{Force: true})
	if _, err := p.docker.ContainerStart(t.Context(), base.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	wait := p.docker.ContainerWait(t.Context(), base.ID, client.ContainerWaitOptions{})
	select {
	case <-wait.Result:
	case err := <-wait.Error:
		t.Fatal(err)
	}
	if _, err := p.docker.ContainerCommit(t.Context(), base.ID, client.ContainerCommitOptions{Reference: ref, Config: cfg, Changes: changes}); err != nil {
		t.Fatal(err)
	}
}

// TestImageHealthcheckOff: an image's HEALTHCHECK, which Docker runs as
// the container's root outside anything the daemon confines, never
// runs; here it would replace the daemon's socket and write into the
// host's slot directory and the workspace.
func TestImageHealthcheckOff(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	const image = "berth-test-healthcheck:1"
	derivedImage(t, p, image, []string{"true"}, &container.Config{
		Healthcheck: &container.HealthConfig{
			Test:     []string{"CMD-SHELL", "touch /run/berth/pwned /workspace/pwned; ln -sf /nowhere /run/berth/sandboxd.sock"},
			Interval: 50 * time.Millisecond, StartInterval: 50 * time.Millisecond, StartPeriod: time.Second,
		},
	})
	sb := create(t, p, provider.Spec{ID: "healthcheck", Image: image})
	insp, err := p.docker.ContainerInspect(t.Context(), sb.rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hc := insp.Container.Config.Healthcheck; hc == nil || len(hc.Test) != 1 || hc.Test[0] != "NONE" {
		t.Errorf("the container's healthcheck is %+v, want NONE", hc)
	}
	// A healthcheck that ran would have left its files within a few of
	// its 50 ms intervals.
	run := filepath.Join(p.slotPath(sb.rec.UID), runDir)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(filepath.Join(run, "pwned")); err == nil {
			t.Fatal("the image's healthcheck ran: it wrote into the host's slot directory")
		}
		if insp, err := p.docker.ContainerInspect(t.Context(), sb.rec.Container, client.ContainerInspectOptions{}); err == nil && insp.Container.State.Health != nil && len(insp.Container.State.Health.Log) > 0 {
			t.Fatalf("the image's healthcheck ran: %+v", insp.Container.State.Health.Log[0])
		}
	}
	if out := sh(t, sb, "ls -A /workspace; echo ok"); strings.TrimSpace(out) != "ok" {
		t.Errorf("the workspace holds %q", out)
	}
}

// TestImageVolumeOverBerth: an image with a VOLUME over a path berth
// mounts (its sockets' directory, its daemon) would hide the daemon's
// socket and leave creation waiting for it: it is refused at once, as
// bad input that says why. A VOLUME above one (/run) is mounted first,
// and berth's mounts on it.
func TestImageVolumeOverBerth(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	for _, tc := range []struct {
		image, volume string
		ok            bool
	}{
		{"berth-test-volume-run-berth:1", "/run/berth", false},
		{"berth-test-volume-run-berth-sub:1", "/run/berth/sub", false},
		{"berth-test-volume-daemon:1", "/.berth/berth-sandboxd", false},
		{"berth-test-volume-workspace-sub:1", "/workspace/data", false},
		{"berth-test-volume-run:1", "/run", true},
	} {
		t.Run(strings.TrimPrefix(tc.volume, "/"), func(t *testing.T) {
			derivedImage(t, p, tc.image, []string{"true"}, nil, "VOLUME "+tc.volume)
			ctx, cancel := context.WithTimeout(t.Context(), startTimeout/2)
			defer cancel()
			sb, err := p.Create(ctx, provider.Spec{Image: tc.image})
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				defer sb.Destroy(context.Background())
				sh(t, sb, "true")
				return
			}
			if err == nil {
				sb.Destroy(context.Background())
				t.Fatal("created")
			}
			if !errors.Is(err, errdefs.ErrBadInput) || !strings.Contains(err.Error(), tc.volume) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line of bad input naming %s", err, tc.volume)
			}
		})
	}
	if left := containers(t, p); len(left) > 0 {
		t.Errorf("containers left: %v", left)
	}
}
