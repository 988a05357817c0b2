package linux

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
)

// loopsUnder lists the loop devices whose image is a file below dir,
// whether or not the file is still linked.
func loopsUnder(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var loops []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached since the glob
		}
		if strings.HasPrefix(string(b), dir+"/") {
			loops = append(loops, strings.Split(f, "/")[3]+" "+strings.TrimSpace(string(b)))
		}
	}
	return loops
}

// imagesUnder lists the workspace images below dir.
func imagesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var images []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == imageFile {
			images = append(images, path)
		}
		return nil
	})
	return images
}

// TestWorkspace: a sandbox's workspace is a file system of the default
// size and file count, owned by the sandbox's user, nosuid and nodev,
// empty, sparse on the host; destroying the sandbox frees its loop device
// and its image.
func TestWorkspace(t *testing.T) {
	p := newTestProvider(t)
	sb := create(t, p, provider.Spec{})
	img := filepath.Join(p.cfg.StateDir, sb.ID(), imageFile)
	var st unix.Stat_t
	if err := unix.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("a fresh workspace image: %d GiB, %d KiB of host disk", st.Size>>30, st.Blocks/2)
	if st.Size != DefaultDisk {
		t.Errorf("image size %d, want %d", st.Size, int64(DefaultDisk))
	}
	if st.Blocks*512 > 1<<20 {
		t.Errorf("a fresh image takes %d KiB of host disk, want under 1 MiB (sparse)", st.Blocks/2)
	}

	out := sh(t, sb, "stat -f -c '%b %S %c' /workspace; stat -c '%u:%g %a' /workspace; ls -A /workspace | wc -l; grep ' /workspace ' /proc/self/mountinfo")
	lines := strings.Split(out, "\n")
	if len(lines) < 4 {
		t.Fatalf("unexpected output: %q", out)
	}
	var blocks, bsize, inodes int64
	if _, err := fmt.Sscan(lines[0], &blocks, &bsize, &inodes); err != nil {
		t.Fatalf("statfs output %q: %v", lines[0], err)
	}
	if size := blocks * bsize; size > DefaultDisk || size < DefaultDisk*95/100 {
		t.Errorf("the workspace holds %d bytes, want about %d", size, int64(DefaultDisk))
	}
	if want := int64(DefaultDisk / bytesPerInode); inodes != want {
		t.Errorf("the workspace holds %d files, want %d", inodes, want)
	}
	if lines[1] != "1000:1000 755" {
		t.Errorf("the workspace's root: owner and mode %q, want 1000:1000 755", lines[1])
	}
	if lines[2] != "0" {
		t.Errorf("a fresh workspace holds %s entries, want none", lines[2])
	}
	opts := strings.Fields(lines[3])
	if len(opts) < 6 || !strings.Contains(opts[5], "nosuid") || !strings.Contains(opts[5], "nodev") {
		t.Errorf("the workspace's mount is not nosuid,nodev: %s", lines[3])
	}

	own := func() (n int) {
		for _, l := range loopsUnder(t, p.cfg.StateDir) {
			if strings.Contains(l, "/"+sb.ID()+"/") || strings.Contains(l, "/"+sb.ID()+"-") {
				n++
			}
		}
		return n
	}
	for _, l := range loopsUnder(t, p.cfg.StateDir) {
		if dev, _, _ := strings.Cut(l, " "); strings.Contains(l, "/"+sb.ID()+"/") {
			dio, _ := os.ReadFile("/sys/block/" + dev + "/loop/dio")
			t.Logf("the workspace's loop device: %s, direct I/O %s", dev, strings.TrimSpace(string(dio)))
		}
	}
	if n := own(); n != 1 {
		t.Errorf("%d loop devices hold the sandbox's image, want 1 (all: %q)", n, loopsUnder(t, p.cfg.StateDir))
	}
	checkDestroyLeavesNothing(t, p, sb)
	testkit.Eventually(t, "the sandbox's loop device detached", 10*time.Second, func() bool { return own() == 0 })
	for _, img := range imagesUnder(t, p.cfg.StateDir) {
		if strings.Contains(img, sb.ID()) {
			t.Errorf("image %s survived", img)
		}
	}
}

// TestWorkspaceSize: a sandbox may ask for a workspace of another size
// than the pool's; too small a size is refused; the provider's default
// can be set.
func TestWorkspaceSize(t *testing.T) {
	p := newTestProvider(t)
	create(t, p, provider.Spec{}) // the pool is filling from here on
	start := time.Now()
	sb := create(t, p, provider.Spec{Resources: provider.Resources{Disk: 32 << 20}})
	t.Logf("a sandbox with a workspace of another size than the pool's took %v to create", time.Since(start))
	if out := sh(t, sb, "stat -f -c '%b %S' /workspace"); !strings.HasSuffix(out, " 4096\n") {
		t.Errorf("statfs: %q", out)
	} else if blocks, _ := strconv.ParseInt(strings.Fields(out)[0], 10, 64); blocks*4096 > 32<<20 || blocks*4096 < 30<<20 {
		t.Errorf("a 32 MiB workspace holds %d bytes", blocks*4096)
	}
	if info, err := sb.Info(t.Context()); err != nil || info.Resources.Disk != 32<<20 {
		t.Errorf("Info = %+v, %v; want a disk of 32 MiB", info.Resources, err)
	}
	_, err := p.Create(t.Context(), provider.Spec{Resources: provider.Resources{Disk: MinDisk - 1}})
	if !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("Create with a disk under the minimum: %v, want ErrBadInput", err)
	}

	cfg, err := fromProviderConfig(provider.Config{"disk": strconv.Itoa(64 << 20), "state-dir": shortTempDir(t), "pool": "-1"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, q) })
	sb = create(t, q, provider.Spec{})
	if info, err := sb.Info(t.Context()); err != nil || info.Resources.Disk != 64<<20 {
		t.Errorf("Info = %+v, %v; want the configured disk of 64 MiB", info.Resources, err)
	}
	if _, err := New(Config{StateDir: shortTempDir(t), Defaults: provider.Resources{Disk: 1 << 20}}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("New with a default disk of 1 MiB: %v, want ErrBadInput", err)
	}
}

// TestWorkspaceCrash: a provider process killed while it has a sandbox
// and warm daemons leaves no loop device attached but the sandbox's; a
// provider opened later removes the warm daemons' images, and destroying
// the sandbox frees its loop device and image.
func TestWorkspaceCrash(t *testing.T) {
	if dir := os.Getenv("BERTH_TEST_CRASH_DIR"); dir != "" {
		p, err := New(Config{StateDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		// A lifetime, should the test fail before it destroys the sandbox.
		if _, err := p.Create(t.Context(), provider.Spec{ID: "crashed", Lifetime: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "warm daemons", 10*time.Second, func() bool {
			ready, _ := p.pool.Counts()
			return ready == p.pool.Size
		})
		unix.Kill(os.Getpid(), unix.SIGKILL)
		select {}
	}
	dir := shortTempDir(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWorkspaceCrash$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BERTH_TEST_CRASH_DIR="+dir)
	out, err := cmd.CombinedOutput()
	t.Cleanup(func() { // whatever happens below, before the state goes
		if q, err := New(Config{StateDir: dir, Pool: -1}); err == nil {
			destroyAll(t, q)
		}
	})
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the creator did not die of SIGKILL: %v\n%s", err, out)
	}
	if n := len(imagesUnder(t, filepath.Join(dir, warmDir))); n == 0 {
		t.Fatalf("the creator left no warm daemon behind; the test tests nothing")
	}
	// The warm daemons exit when their host's end of the control socket
	// closes, and their loop devices go with them.
	testkit.Eventually(t, "the warm daemons' loop devices detached", 10*time.Second, func() bool {
		return len(loopsUnder(t, dir)) == 1
	})
	if l := loopsUnder(t, dir); !strings.Contains(l[0], "/crashed/") {
		t.Errorf("the loop device left is not the sandbox's: %q", l)
	}
	// The sweep leaves recent warm directories alone: age them.
	old := time.Now().Add(-time.Hour)
	entries, _ := os.ReadDir(filepath.Join(dir, warmDir))
	for _, e := range entries {
		os.Chtimes(filepath.Join(dir, warmDir, e.Name()), old, old)
	}
	p, err := New(Config{StateDir: dir, Pool: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	if images := imagesUnder(t, dir); len(images) != 1 {
		t.Errorf("after reopening, images %q; want the sandbox's only", images)
	}
	got, err := p.Get(t.Context(), "crashed")
	if err != nil {
		t.Fatal(err)
	}
	sb := got.(*sandbox)
	sh(t, sb, "echo survived > f")
	checkDestroyLeavesNothing(t, p, sb)
	testkit.Eventually(t, "the sandbox's loop device detached", 10*time.Second, func() bool { return len(loopsUnder(t, dir)) == 0 })
	if images := imagesUnder(t, dir); len(images) != 0 {
		t.Errorf("images survived: %q", images)
	}
}
