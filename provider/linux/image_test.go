package linux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/image/imagetest"
)

// unpackCounter counts the images a provider's cache unpacked, from its
// log.
type unpackCounter struct{ n atomic.Int64 }

func (u *unpackCounter) Enabled(context.Context, slog.Level) bool { return true }
func (u *unpackCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "image unpacked" {
		u.n.Add(1)
	}
	return nil
}
func (u *unpackCounter) WithAttrs([]slog.Attr) slog.Handler { return u }
func (u *unpackCounter) WithGroup(string) slog.Handler      { return u }

// TestImage runs sandboxes on an image's root filesystem: what only the
// image has, owned as the image says, read-only, unpacked once.
func TestImage(t *testing.T) {
	var unpacks unpackCounter
	p, err := New(Config{StateDir: shortTempDir(t), Logger: slog.New(&unpacks)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	if !p.Capabilities().Image {
		t.Error("Capabilities().Image is false")
	}
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	refs := map[string]string{"oci": "oci:" + layout + ":v1"}
	if cli, why := imagetest.Docker(t.Context()); cli == nil {
		t.Log("docker image not tried: " + why)
	} else {
		ref := fmt.Sprintf("berth-linux-image-test:%d", time.Now().UnixNano())
		imagetest.DockerImport(t, cli, ref, imagetest.Layer(t, imagetest.RootFS(t)...))
		cli.Close()
		refs["docker"] = ref
	}
	for kind, ref := range refs {
		t.Run(kind, func(t *testing.T) {
			before := unpacks.n.Load()
			start := time.Now()
			sb := create(t, p, provider.Spec{Image: ref})
			first := time.Since(start)
			out := sh(t, sb, "cat "+imagetest.Marker+"; id -u; stat -c '%U %u %A' /etc/berth-image /srv/app/data /srv/far /usr/bin/suid; "+
				"test -e /usr/bin/apt && echo host apt; echo x > /etc/x || echo read-only")
			// The image's set-user-id program is not: see TestImageKeptFromHostUsers.
			want := imagetest.MarkerData + "1000\nroot 0 -rw-r--r--\nsandbox 1000 -rw-r--r--\nnobody 65534 -rw-r--r--\nroot 0 -rwxr-xr-x\nread-only\n"
			if out != want {
				t.Errorf("in the image's root:\n%s\nwant\n%s", out, want)
			}
			start = time.Now()
			sb2 := create(t, p, provider.Spec{Image: ref})
			t.Logf("create from %s: first %v (unpacking), second %v", kind, first.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			if out := sh(t, sb2, "cat "+imagetest.Marker); out != imagetest.MarkerData {
				t.Errorf("second sandbox: %q", out)
			}
			if n := unpacks.n.Load() - before; n != 1 {
				t.Errorf("unpacked %d times for two sandboxes, want once", n)
			}
		})
	}
	if _, err := p.Create(t.Context(), provider.Spec{Image: refs["oci"], RootFS: layout}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("image and root filesystem: %v, want bad input", err)
	}
	if _, err := p.Create(t.Context(), provider.Spec{Image: "oci:/nonexistent"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("missing image: %v, want bad input", err)
	}
}

// TestImageKeptFromHostUsers: a host user other than root reaches no
// file of an image the provider unpacked, and finds no set-id program
// there: an image's set-user-id root program was any local user's way
// to the host uid of sandboxes' root.
func TestImageKeptFromHostUsers(t *testing.T) {
	p, err := New(Config{StateDir: shortTempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	ref := "oci:" + layout + ":v1"
	sb := create(t, p, provider.Spec{Image: ref})
	if out := sh(t, sb, "cat "+imagetest.Marker); out != imagetest.MarkerData {
		t.Fatalf("the sandbox does not run on the image: %q", out)
	}
	root, err := p.images.RootFS(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	suid := filepath.Join(root, "usr/bin/suid") // 04755 in the image
	if fi, err := os.Stat(suid); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("%s on the host: %v (%v), want no set-id bits", suid, fi.Mode(), err)
	}
	// The state directory is open to others (sandboxes' daemons reach
	// it), so nothing above the cache keeps nobody out.
	cmd := exec.Command("/usr/bin/stat", "-c", "%A %u", suid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("nobody reaches the image's files: %v: %s", err, out)
	}
}
