package docker

import (
	"github.com/berth-dev/berth/internal/randid"

	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
)

// hostImageProvider opens a provider whose default image is made from
// the host's files under a tag of the test's own (unless cfg names
// one), removed when the test ends; log gets the provider's events.
func hostImageProvider(t *testing.T, cfg Config, log *testkit.SyncBuffer) *Provider {
	t.Helper()
	needDocker(t)
	if cfg.HostImage == "" {
		cfg.HostImage = "berth-host-test-" + randid.Hex(4) + ":1"
		// Registered first, so that it runs last: after the provider
		// and its sandboxes are gone.
		t.Cleanup(func() { removeImage(t, cfg.HostImage) })
	}
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.DaemonPath = testEnv.daemon
	p, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// removeImage removes an image a test made.
func removeImage(t *testing.T, ref string) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Error(err)
		return
	}
	defer cli.Close()
	// Cleanups run after t.Context() is done.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{}); err != nil && !strings.Contains(err.Error(), "No such image") {
		t.Errorf("remove image %s: %v", ref, err)
	}
}

// TestDefaultImage: with no image configured, the provider makes its
// default image from the host's files, bounded, and a sandbox of a spec
// naming no image runs on it (sh, coreutils, /usr/bin/python3 with its
// standard library and C extensions); a second provider on the same
// engine finds it made and makes nothing.
func TestDefaultImage(t *testing.T) {
	var log testkit.SyncBuffer
	p := hostImageProvider(t, Config{Pool: -1, hostWait: 3 * time.Minute}, &log)
	start := time.Now()
	sb := create(t, p, provider.Spec{ID: "host-image"})
	t.Logf("made the default image and a sandbox in %v", time.Since(start))
	if sb.rec.Image != p.cfg.HostImage {
		t.Errorf("the sandbox runs image %q, want the default %q", sb.rec.Image, p.cfg.HostImage)
	}
	out := sh(t, sb, `set -e
/usr/bin/python3 -c 'import ctypes, json, sqlite3, hashlib, zlib, ssl, subprocess; print("python", ctypes.sizeof(ctypes.c_long))'
/bin/sh -c 'echo sh' && ls / >/dev/null && sort --version >/dev/null && grep -q root /etc/passwd && echo coreutils
test ! -e /etc/shadow && echo no-shadow
find / -xdev -perm /6000 | wc -l
find / -xdev | wc -l`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || lines[0] != "python 8" || lines[1] != "sh" || lines[2] != "coreutils" || lines[3] != "no-shadow" || lines[4] != "0" {
		t.Fatalf("in a sandbox of the default image:\n%s", out)
	}
	if n, err := strconv.Atoi(lines[5]); err != nil || n > defaultRootBounds.Entries {
		t.Errorf("the default image holds %s entries, more than %d", lines[5], defaultRootBounds.Entries)
	}
	img, err := p.docker.ImageInspect(t.Context(), p.cfg.HostImage)
	if err != nil {
		t.Fatal(err)
	}
	if img.Size > defaultRootBounds.Bytes || img.Config == nil || img.Config.Labels[LabelHostImage] != hostImageFormat {
		t.Errorf("the default image: %d bytes, labels %v", img.Size, img.Config)
	}
	t.Logf("the default image: %.1f MB, %s entries", float64(img.Size)/1e6, lines[5])
	if n := strings.Count(log.String(), "making the default image"); n != 1 {
		t.Errorf("the image was made %d times, want once:\n%s", n, log.String())
	}
	p.host.ensure(t.Context()) // asked again: nothing made
	var again testkit.SyncBuffer
	q := hostImageProvider(t, Config{Pool: -1, HostImage: p.cfg.HostImage}, &again)
	if err := q.host.ensure(t.Context()); err != nil {
		t.Fatal(err)
	}
	if strings.Count(log.String()+again.String(), "making the default image") != 1 {
		t.Errorf("the image was made again:\n%s%s", log.String(), again.String())
	}
	if after, err := q.docker.ImageInspect(t.Context(), p.cfg.HostImage); err != nil || after.ID != img.ID {
		t.Errorf("the image changed: %v %s, was %s", err, after.ID, img.ID)
	}
	if r := p.Report(); r != "" {
		t.Errorf("the provider reports %q once its image is made", r)
	}
}

// TestDefaultImageFails: a default image that cannot be made (here, the
// host's files past its bounds) is reported in one line by the provider
// (berth providers shows it) and fails creation retryably, not as bad
// input; the next creation tries again, and while that attempt runs a
// creation that waits past its wait fails retryably too. Once the image
// can be made, creation works.
func TestDefaultImageFails(t *testing.T) {
	var log testkit.SyncBuffer
	p := hostImageProvider(t, Config{Pool: -1, hostBounds: rootBounds{Bytes: 1 << 20, Entries: 20000}, hostWait: 3 * time.Minute}, &log)
	_, err := p.Create(t.Context(), provider.Spec{ID: "no-image"})
	if err == nil || errdefs.KindOf(err) != errdefs.Internal || !strings.Contains(err.Error(), p.cfg.HostImage) ||
		!strings.Contains(err.Error(), "more than 1 MiB") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("creation without the image: %v (%s); want one retryable line naming the image and why", err, errdefs.KindOf(err))
	}
	if r := p.Report(); !strings.Contains(r, p.cfg.HostImage) || !strings.Contains(r, "more than 1 MiB") || strings.Contains(r, "\n") {
		t.Errorf("the provider reports %q; want one line on the image not made", r)
	}
	if _, err := p.docker.ImageInspect(t.Context(), p.cfg.HostImage); err == nil {
		t.Errorf("an image was left by an attempt that failed")
	}
	// The next attempt, with the host's files within bounds, is started
	// by the next creation, which does not wait for it.
	p.host.bounds, p.host.wait = defaultRootBounds, time.Millisecond
	_, err = p.Create(t.Context(), provider.Spec{ID: "no-image"})
	if err == nil || errdefs.KindOf(err) != errdefs.Internal || !strings.Contains(err.Error(), "still being made") {
		t.Fatalf("creation while the image is made: %v; want a retryable error saying so", err)
	}
	if r := p.Report(); !strings.Contains(r, "being made") {
		t.Errorf("the provider reports %q while the image is made", r)
	}
	p.host.mu.Lock()
	p.host.wait = 3 * time.Minute
	p.host.mu.Unlock()
	sb := create(t, p, provider.Spec{ID: "no-image"})
	if out := sh(t, sb, "echo ok"); out != "ok\n" {
		t.Errorf("a sandbox of the image made at last: %q", out)
	}
	if n := strings.Count(log.String(), "making the default image"); n != 2 {
		t.Errorf("%d attempts, want 2:\n%s", n, log.String())
	}
}

// TestHostRootBounds: the default image's root, made from a tree with
// set-id files, devices, a fifo, links out and an /etc of its own, has
// none of them; past its bounds in bytes or entries, or with a loop of
// links, it is not made.
func TestHostRootBounds(t *testing.T) {
	root := t.TempDir()
	write := func(name, data string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask, set-id bits too
			t.Fatal(err)
		}
	}
	link := func(name, target string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("usr/bin/dash", "#!/usr/bin/dash\n", 0o755|os.ModeSetuid)
	link("usr/bin/sh", "dash")
	link("bin", "usr/bin")
	write("usr/bin/python3.11", "python", 0o755|os.ModeSetgid)
	link("usr/bin/python3", "python3.11")
	write("usr/bin/cat", "cat", 0o755)
	link("usr/bin/ls", "/etc/shadow")    // a program out of /usr: left out
	link("usr/bin/grep", "grep")         // a loop: left out
	link("usr/bin/sed", "../../etc/sed") // out, relatively
	write("usr/lib/python3.11/os.py", "# os", 0o644)
	write("usr/lib/python3.11/test/test_os.py", "# a test", 0o644)
	link("usr/lib/python3.11/in.py", "os.py")
	link("usr/lib/python3.11/out.py", "../../../etc/shadow")
	if err := syscall.Mknod(filepath.Join(root, "usr/lib/python3.11/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "usr/lib/python3.11/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("etc/shadow", "root:SECRET:::", 0o600)
	write("etc/passwd", "host-user:x:5:5::/:/bin/sh\n", 0o644)
	write("etc/sed", "sed", 0o755)

	var buf bytes.Buffer
	if err := writeHostRoot(t.Context(), &buf, root, defaultRootBounds); err != nil {
		t.Fatal(err)
	}
	got := map[string]*tar.Header{}
	data := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		name := strings.TrimSuffix(hdr.Name, "/")
		got[name], data[name] = hdr, string(b)
		if hdr.Uid != 0 || hdr.Gid != 0 || hdr.Mode&0o6000 != 0 || (hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir && hdr.Typeflag != tar.TypeSymlink) {
			t.Errorf("%s: type %c, mode %o, owner %d:%d; want a file, directory or link of root's, no set-id bits", name, hdr.Typeflag, hdr.Mode, hdr.Uid, hdr.Gid)
		}
	}
	for name, want := range map[string]string{
		"bin": "usr/bin", "usr/bin/sh": "dash", "usr/bin/python3": "python3.11", "usr/lib/python3.11/in.py": "os.py",
	} {
		if h := got[name]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != want {
			t.Errorf("%s: %+v, want a link to %s", name, h, want)
		}
	}
	for _, name := range []string{"usr/bin/dash", "usr/bin/python3.11", "usr/bin/cat", "usr/lib/python3.11/os.py"} {
		if h := got[name]; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o777 == 0 {
			t.Errorf("%s: %+v, want the host's file", name, h)
		}
	}
	if h := got["tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory of mode 1777", h)
	}
	for _, name := range []string{"usr/bin/ls", "usr/bin/grep", "usr/bin/sed", "etc/shadow", "etc/sed", "usr/lib/python3.11/test",
		"usr/lib/python3.11/test/test_os.py", "usr/lib/python3.11/out.py", "usr/lib/python3.11/null", "usr/lib/python3.11/fifo"} {
		if got[name] != nil {
			t.Errorf("%s is in the image", name)
		}
	}
	if p := data["etc/passwd"]; strings.Contains(p, "host-user") || !strings.Contains(p, "root:x:0:0") {
		t.Errorf("/etc/passwd is not berth's: %q", p)
	}

	// Past the bounds.
	write("usr/lib/python3.11/big.bin", strings.Repeat("x", 2<<20), 0o644)
	for _, c := range []struct {
		bounds rootBounds
		says   string
	}{
		{rootBounds{Bytes: 1 << 20, Entries: 20000}, "more than 1 MiB"},
		{rootBounds{Bytes: 512 << 20, Entries: 10}, "more than 10 entries"},
	} {
		err := writeHostRoot(t.Context(), io.Discard, root, c.bounds)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("bounds %+v: %v, want an error saying %s", c.bounds, err, c.says)
		}
	}
}
