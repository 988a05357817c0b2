package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/klauspost/compress/zstd"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/provider/image/imagetest"
)

const shift = 100000

// docker returns the host's engine, or skips the test saying why there
// is none.
func docker(t testing.TB) *client.Client {
	t.Helper()
	cli, why := imagetest.Docker(t.Context())
	if cli == nil {
		t.Skip("skipped: " + why)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// unpacks counts the images a cache unpacked, from its log.
type unpacks struct{ n atomic.Int64 }

func (u *unpacks) Enabled(context.Context, slog.Level) bool { return true }
func (u *unpacks) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "image unpacked" {
		u.n.Add(1)
	}
	return nil
}
func (u *unpacks) WithAttrs([]slog.Attr) slog.Handler { return u }
func (u *unpacks) WithGroup(string) slog.Handler      { return u }

func open(t testing.TB, dir string, opts ...Option) (*Cache, *unpacks) {
	t.Helper()
	u := &unpacks{}
	c, err := Open(dir, append([]Option{WithIDShift(shift), WithLogger(slog.New(u))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, u
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// checkRoot checks a root filesystem unpacked from imagetest.RootFS.
func checkRoot(t *testing.T, root string) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(root, imagetest.Marker)); err != nil || string(b) != imagetest.MarkerData {
		t.Errorf("marker: %q, %v", b, err)
	}
	for p, want := range map[string]uint32{imagetest.Marker: shift, "srv/app/data": shift + 1000, "srv/far": shift + 65534, "usr": shift, "bin": shift} {
		if uid, gid := owner(t, filepath.Join(root, p)); uid != want || gid != want {
			t.Errorf("%s owned by %d:%d, want %d", p, uid, gid, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/bin/suid")); err != nil || fi.Mode()&os.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/suid, 04755 in the image: %v, %v; want 0755", fi.Mode(), err)
	}
	if uid, _ := owner(t, root); uid != shift {
		t.Errorf("root owned by %d", uid)
	}
}

// checkEmpty fails unless the cache holds no image and nothing is left
// in its tmp.
func checkEmpty(t *testing.T, c *Cache) {
	t.Helper()
	imgs, err := c.List(t.Context())
	if err != nil || len(imgs) != 0 {
		t.Errorf("images in the cache: %v, %v", imgs, err)
	}
	if left, _ := os.ReadDir(filepath.Join(c.Dir(), tmpDir)); len(left) != 0 {
		t.Errorf("left in tmp: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(c.Dir(), "sha256", "*")); len(left) != 0 {
		t.Errorf("left in the cache: %v", left)
	}
}

// TestDockerImage: an image of the host's engine, by name and by id,
// unpacked once.
func TestDockerImage(t *testing.T) {
	cli := docker(t)
	ref := fmt.Sprintf("berth-image-test:%d", time.Now().UnixNano())
	id := imagetest.DockerImport(t, cli, ref, imagetest.Layer(t, imagetest.RootFS(t)...))
	c, u := open(t, t.TempDir())
	root, err := c.RootFS(t.Context(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(c.Dir(), "sha256", strings.TrimPrefix(id, "sha256:")); root != want {
		t.Errorf("root %s, want %s", root, want)
	}
	checkRoot(t, root)
	start := time.Now()
	again, err := c.RootFS(t.Context(), id)
	if err != nil || again != root {
		t.Errorf("by id: %s, %v", again, err)
	}
	t.Logf("cached lookup: %v", time.Since(start))
	if n := u.n.Load(); n != 1 {
		t.Errorf("unpacked %d times, want once", n)
	}
	imgs, err := c.List(t.Context())
	if err != nil || len(imgs) != 1 || imgs[0].Digest != id || imgs[0].Files == 0 || imgs[0].InUse {
		t.Fatalf("List: %+v, %v", imgs, err)
	}
	if len(imgs[0].Refs) != 1 || imgs[0].Refs[0] != ref {
		t.Errorf("refs %v", imgs[0].Refs)
	}
}

// TestDockerHostile: an image of the engine whose layer has a device
// node is refused as bad input, and leaves nothing.
func TestDockerHostile(t *testing.T) {
	cli := docker(t)
	ref := fmt.Sprintf("berth-image-hostile:%d", time.Now().UnixNano())
	imagetest.DockerImport(t, cli, ref, imagetest.Layer(t, imagetest.Dir("dev/", 0, 0),
		imagetest.Entry{Name: "dev/sda", Type: tar.TypeBlock, Mode: 0o666}, imagetest.File("f", "x")))
	c, _ := open(t, t.TempDir())
	_, err := c.RootFS(t.Context(), ref)
	if !errors.Is(err, errdefs.ErrBadInput) || !strings.Contains(err.Error(), "device") {
		t.Errorf("RootFS: %v, want bad input", err)
	}
	checkEmpty(t, c)
}

// TestMissingImage: what cannot be found says what to do, in one line.
func TestMissingImage(t *testing.T) {
	docker(t)
	c, _ := open(t, t.TempDir(), WithPullTimeout(time.Minute))
	_, err := c.RootFS(t.Context(), "berth-no-such-image:1")
	t.Log(err)
	if !errors.Is(err, errdefs.ErrBadInput) || !strings.Contains(err.Error(), "docker load") || strings.Contains(err.Error(), "\n") {
		t.Errorf("missing docker image: %v", err)
	}
	_, err = c.RootFS(t.Context(), "Not A Reference")
	if !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("invalid reference: %v", err)
	}
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.File("f", "x")))
	for _, ref := range []string{"oci:/nonexistent/layout", layout + ":v2", "oci:" + t.TempDir(), ""} {
		if _, err := c.RootFS(t.Context(), ref); !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v", ref, err)
		}
	}
	checkEmpty(t, c)
}

// TestOCILayout: a layout by path and tag, layers in order with their
// whiteouts, and the tag-less form for a layout of one image.
func TestOCILayout(t *testing.T) {
	layout := t.TempDir()
	top := imagetest.Layer(t, imagetest.File("etc/.wh.passwd", ""), imagetest.File("srv/.wh..wh..opq", ""), imagetest.File("srv/new", "new"))
	d := imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...), top)
	c, u := open(t, t.TempDir())
	for _, ref := range []string{"oci:" + layout + ":v1", layout, "oci:" + layout} {
		root, err := c.RootFS(t.Context(), ref)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if want := filepath.Join(c.Dir(), "sha256", d.Encoded()); root != want {
			t.Errorf("%s: root %s, want %s", ref, root, want)
		}
		if _, err := os.Lstat(filepath.Join(root, "etc/passwd")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("whited out etc/passwd: %v", err)
		}
		if names, _ := os.ReadDir(filepath.Join(root, "srv")); len(names) != 1 || names[0].Name() != "new" {
			t.Errorf("opaque srv: %v", names)
		}
		if b, err := os.ReadFile(filepath.Join(root, imagetest.Marker)); err != nil || string(b) != imagetest.MarkerData {
			t.Errorf("marker: %q, %v", b, err)
		}
	}
	if n := u.n.Load(); n != 1 {
		t.Errorf("unpacked %d times, want once", n)
	}
	// A blob that does not match its digest is refused.
	blob := filepath.Join(layout, "blobs", "sha256")
	entries, _ := os.ReadDir(blob)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(blob, e.Name()))
		if len(b) > 1000 { // a layer, not a JSON document
			b[len(b)-1] ^= 1
			os.WriteFile(filepath.Join(blob, e.Name()), b, 0o644)
		}
	}
	c2, _ := open(t, t.TempDir())
	if _, err := c2.RootFS(t.Context(), layout); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("a corrupt layer: %v", err)
	}
	checkEmpty(t, c2)
}

// TestCompressed: layers compressed with zstd, or with gzip, are told
// by their magic numbers.
func TestCompressed(t *testing.T) {
	var z bytes.Buffer
	zw, err := zstd.NewWriter(&z)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(imagetest.Layer(t, imagetest.File("etc/zstd", "zstd")))
	zw.Close()
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.Dir("etc/", 0, 0), imagetest.File("etc/gzip", "gzip")), z.Bytes())
	c, _ := open(t, t.TempDir())
	root, err := c.RootFS(t.Context(), layout)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"gzip", "zstd"} {
		if b, err := os.ReadFile(filepath.Join(root, "etc", f)); err != nil || string(b) != f {
			t.Errorf("%s layer: %q, %v", f, b, err)
		}
	}
}

// TestConcurrent: RootFS calls of one image at once, from caches opened
// apart (as processes would: each has locks of its own), unpack it once
// and all return it whole.
func TestConcurrent(t *testing.T) {
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	dir := t.TempDir()
	var total atomic.Int64
	var wg sync.WaitGroup
	roots := make([]string, 4)
	for i := range roots {
		c, u := open(t, dir)
		wg.Go(func() {
			root, err := c.RootFS(t.Context(), layout)
			if err != nil {
				t.Error(err)
				return
			}
			roots[i] = root
			total.Add(u.n.Load())
		})
	}
	wg.Wait()
	if n := total.Load(); n != 1 {
		t.Errorf("unpacked %d times, want once", n)
	}
	for _, r := range roots {
		if r != roots[0] {
			t.Errorf("roots differ: %v", roots)
		}
	}
	checkRoot(t, roots[0])
}

// TestHostileLayers: layers that try to leave the root, make devices or
// exceed the bounds are refused as bad input, and leave nothing.
func TestHostileLayers(t *testing.T) {
	outside := t.TempDir()
	base := imagetest.Layer(t, imagetest.Dir("etc/", 0, 0), imagetest.File("etc/a", "a"))
	big := imagetest.Layer(t, imagetest.File("big", strings.Repeat("x", 1<<20)))
	// A header that declares a TiB, and no data.
	var huge bytes.Buffer
	tw := tar.NewWriter(&huge)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		layer []byte
		opts  []Option
	}{
		{"dot-dot", imagetest.Layer(t, imagetest.File("../../escaped", "x")), nil},
		{"absolute link then file", imagetest.Layer(t, imagetest.Entry{Name: "etc", Type: tar.TypeSymlink, Link: outside}, imagetest.File("etc/victim", "x")), nil},
		{"hard link out", imagetest.Layer(t, imagetest.Entry{Name: "h", Type: tar.TypeLink, Link: "../../../etc/passwd"}), nil},
		{"whiteout of dot-dot", imagetest.Layer(t, imagetest.File("etc/.wh...", "")), nil},
		{"device", imagetest.Layer(t, imagetest.Entry{Name: "etc/mem", Type: tar.TypeChar}), nil},
		{"huge declared size", huge.Bytes(), nil},
		{"too many bytes", big, []Option{WithMaxSize(1 << 19)}},
		{"too many files", imagetest.Layer(t, imagetest.File("a", ""), imagetest.File("b", ""), imagetest.File("c", "")), []Option{WithMaxFiles(4)}},
		{"not a tar", []byte(strings.Repeat("not a tar", 200)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layout := t.TempDir()
			imagetest.WriteLayout(t, layout, "v1", base, tc.layer)
			c, _ := open(t, t.TempDir(), tc.opts...)
			_, err := c.RootFS(t.Context(), layout)
			if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") {
				t.Errorf("RootFS: %v, want one line of bad input", err)
			}
			t.Log(err)
			checkEmpty(t, c)
			if left, _ := os.ReadDir(outside); len(left) != 0 {
				t.Errorf("written outside: %v", left)
			}
		})
	}
}

// TestLeftovers: what a crashed unpack left is removed by the next Open,
// unless another process holds its lock (it is unpacking); a cancelled
// unpack leaves nothing.
func TestLeftovers(t *testing.T) {
	dir := t.TempDir()
	c, _ := open(t, dir)
	crashed := filepath.Join(dir, tmpDir, "sha256-"+strings.Repeat("a", 64))
	busy := filepath.Join(dir, tmpDir, "sha256-"+strings.Repeat("b", 64))
	for _, d := range []string{crashed + "/rootfs/usr", busy + "/rootfs/usr"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	unlock, ok := c.tryLock(filepath.Base(busy))
	if !ok {
		t.Fatal("lock")
	}
	defer unlock()
	open(t, dir)
	if _, err := os.Stat(crashed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a crash's leftover is still there: %v", err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("an unpack in progress was removed: %v", err)
	}
	unlock()
	os.RemoveAll(busy)

	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.RootFS(ctx, layout); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	checkEmpty(t, c)
}

// TestRemove: List, Remove by reference or digest, and Prune, which
// spares an image mounted somewhere on the host.
func TestRemove(t *testing.T) {
	layout1, layout2 := t.TempDir(), t.TempDir()
	imagetest.WriteLayout(t, layout1, "v1", imagetest.Layer(t, imagetest.File("one", "1")))
	d2 := imagetest.WriteLayout(t, layout2, "v1", imagetest.Layer(t, imagetest.Dir("d/", 0, 0), imagetest.File("d/two", "2")))
	c, _ := open(t, t.TempDir())
	if _, err := c.RootFS(t.Context(), layout1); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove(t.Context(), layout1); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, c)
	if err := c.Remove(t.Context(), layout1); err != nil {
		t.Errorf("removing an image not in the cache: %v", err)
	}
	if err := c.Remove(t.Context(), "sha256:"+strings.Repeat("0", 64)); err != nil {
		t.Errorf("removing a digest not in the cache: %v", err)
	}
	// By the reference it was unpacked for, once its layout is gone.
	gone := t.TempDir()
	imagetest.WriteLayout(t, gone, "v1", imagetest.Layer(t, imagetest.File("gone", "1")))
	if _, err := c.RootFS(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(gone)
	if err := c.Remove(t.Context(), gone); err != nil {
		t.Errorf("removing an image whose layout is gone: %v", err)
	}
	checkEmpty(t, c)
	root2, err := c.RootFS(t.Context(), layout2)
	if err != nil {
		t.Fatal(err)
	}
	// Mount part of it, as a sandbox does, in a mount namespace of its
	// own so that the host's mounts do not change.
	mnt := t.TempDir()
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" "$2" && echo ok && exec sleep 600`, "sh", filepath.Join(root2, "d"), mnt)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "ok\n" {
		t.Fatalf("mount: %q, %v", line, err)
	}
	imgs, err := c.List(t.Context())
	if err != nil || len(imgs) != 1 || !imgs[0].InUse {
		t.Errorf("List with the image mounted: %+v, %v", imgs, err)
	}
	if err := c.Remove(t.Context(), d2.String()); !errors.Is(err, ErrInUse) {
		t.Errorf("Remove of a mounted image: %v", err)
	}
	if removed, err := c.Prune(t.Context(), time.Nanosecond); err != nil || len(removed) != 0 {
		t.Errorf("Prune with the image mounted: %v, %v", removed, err)
	}
	holder.Process.Kill()
	holder.Wait()
	if removed, err := c.Prune(t.Context(), time.Hour); err != nil || len(removed) != 0 {
		t.Errorf("Prune of an image used within the grace: %v, %v", removed, err)
	}
	removed, err := c.Prune(t.Context(), time.Nanosecond)
	if err != nil || len(removed) != 1 || removed[0].Digest != d2.String() {
		t.Errorf("Prune: %v, %v", removed, err)
	}
	checkEmpty(t, c)
}

// TestIDShift: a cache keeps the id mapping it was made for.
func TestIDShift(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	if _, err := Open(dir, WithIDShift(200000)); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("another shift: %v", err)
	}
}

// BenchmarkRootFS measures the first unpack of an image and a cached
// lookup: of the test image, or of the Docker image BERTH_BENCH_IMAGE
// names.
func BenchmarkRootFS(b *testing.B) {
	cli := docker(b)
	ref := os.Getenv("BERTH_BENCH_IMAGE")
	if ref == "" {
		ref = fmt.Sprintf("berth-image-bench:%d", time.Now().UnixNano())
		imagetest.DockerImport(b, cli, ref, imagetest.Layer(b, imagetest.RootFS(b)...))
	}
	b.Run("unpack", func(b *testing.B) {
		var img Image
		for b.Loop() {
			c, _ := open(b, b.TempDir())
			if _, err := c.RootFS(b.Context(), ref); err != nil {
				b.Fatal(err)
			}
			imgs, _ := c.List(b.Context())
			img = imgs[0]
		}
		b.ReportMetric(float64(img.Size)/1e6, "MB")
		b.ReportMetric(float64(img.Files), "files")
	})
	b.Run("cached", func(b *testing.B) {
		c, _ := open(b, b.TempDir())
		if _, err := c.RootFS(b.Context(), ref); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := c.RootFS(b.Context(), ref); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// childEnv, set to "DIR LAYOUT", makes the test binary a process that
// opens the cache in DIR and unpacks LAYOUT (see TestCrash).
const childEnv = "BERTH_IMAGE_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		dir, layout, _ := strings.Cut(v, " ")
		c, err := Open(dir, WithIDShift(shift))
		if err == nil {
			_, err = c.RootFS(context.Background(), layout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestCrash: a process killed while it unpacks leaves no image in place;
// the next one to open the cache removes what it left, and unpacks the
// image whole.
func TestCrash(t *testing.T) {
	layout, dir := t.TempDir(), t.TempDir()
	big := make([]byte, 96<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>12)
	}
	d := imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...), imagetest.Layer(t, imagetest.File("big", string(big))))
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"="+dir+" "+layout)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, tmpDir, tmpName(d), "rootfs", "big")
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(work); err == nil {
			break
		}
		if time.Now().After(deadline) {
			child.Process.Kill()
			t.Fatal("the child never started unpacking")
		}
		time.Sleep(time.Millisecond)
	}
	child.Process.Kill()
	child.Wait()
	final := filepath.Join(dir, "sha256", d.Encoded())
	if _, err := os.Stat(final); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a killed unpack left an image in place: %v", err)
	}
	c, _ := open(t, dir)
	if left, _ := os.ReadDir(filepath.Join(dir, tmpDir)); len(left) != 0 {
		t.Errorf("left in tmp after Open: %v", left)
	}
	root, err := c.RootFS(t.Context(), layout)
	if err != nil || root != final {
		t.Fatalf("after the crash: %s, %v", root, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "big")); err != nil || fi.Size() != int64(len(big)) {
		t.Errorf("big: %v, %v", fi, err)
	}
	checkRoot(t, root)
}

// TestHostUsersKeptOut: no host user but root reaches an image's files,
// and none of them is set-user-id or set-group-id on the host: an
// image's set-user-id root program was anyone's way to the uid every
// sandbox's root maps to. Images unpacked before set-id bits were
// dropped lose them when the cache is opened.
func TestHostUsersKeptOut(t *testing.T) {
	parent := t.TempDir()
	for _, d := range []string{parent, filepath.Dir(parent)} { // as a state directory is
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(parent, "images")
	old := filepath.Join(dir, "sha256", "0123", "usr", "bin")
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o711) // as an older berth made it
	if err := os.WriteFile(filepath.Join(old, "su"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(old, "su"), os.ModeSetuid|os.ModeSetgid|0o755); err != nil {
		t.Fatal(err)
	}
	layout := t.TempDir()
	imagetest.WriteLayout(t, layout, "v1", imagetest.Layer(t, imagetest.RootFS(t)...))
	c, _ := open(t, dir)
	root, err := c.RootFS(t.Context(), "oci:"+layout+":v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "usr/bin/suid"), filepath.Join(old, "su")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v (%v), want 0755 without set-id bits", p, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the cache directory's mode: %v (%v), want 0700", fi.Mode(), err)
	}
	cmd := exec.Command("/usr/bin/stat", filepath.Join(root, "usr/bin/suid"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
		t.Errorf("nobody reaches an image's file: %v: %s", err, out)
	}
}
