package wsimage

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mountSource is the device mounted on target, from mountinfo, or "".
func mountSource(t *testing.T, target string) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[4] != target {
			continue
		}
		for i, f := range fields {
			if f == "-" && i+2 < len(fields) {
				return fields[i+2]
			}
		}
	}
	return ""
}

// backing is the file loop device dev (/dev/loopN) serves, or "" once
// it is detached.
func backing(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// detach clears loop device dev if it still serves image: a failed test
// must not leave it behind.
func detach(dev, image string) {
	if dev == "" || backing(dev) != image {
		return
	}
	if f, err := os.OpenFile(dev, os.O_RDWR, 0); err == nil {
		_ = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
		f.Close()
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestMake(t *testing.T) {
	const size, uid, gid = 32 << 20, 1234, 5678
	dir := t.TempDir()
	image, target := filepath.Join(dir, "ws.img"), filepath.Join(dir, "ws")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Make(image, target, size, uid, gid); err != nil {
		t.Fatal(err)
	}
	dev := mountSource(t, target)
	t.Cleanup(func() { Unmount(target); detach(dev, image) })
	if !strings.HasPrefix(dev, "/dev/loop") || backing(dev) != image {
		t.Fatalf("mounted from %q backed by %q, want a loop device of %s", dev, backing(dev), image)
	}

	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.EXT4_SUPER_MAGIC {
		t.Errorf("file system type %#x, want ext4", st.Type)
	}
	if st.Flags&unix.ST_NOSUID == 0 || st.Flags&unix.ST_NODEV == 0 {
		t.Errorf("mount flags %#x, want nosuid and nodev", st.Flags)
	}
	if want := uint64(size / BytesPerInode); st.Files != want {
		t.Errorf("%d inodes, want %d", st.Files, want)
	}
	var root unix.Stat_t
	if err := unix.Stat(target, &root); err != nil {
		t.Fatal(err)
	}
	if root.Uid != uid || root.Gid != gid {
		t.Errorf("root owned by %d:%d, want %d:%d", root.Uid, root.Gid, uid, gid)
	}
	entries, err := os.ReadDir(target)
	if err != nil || len(entries) != 0 {
		t.Errorf("fresh workspace holds %v (%v), want nothing (no lost+found)", entries, err)
	}
	// Sparse: a fresh image takes little of the host's disk.
	var img unix.Stat_t
	if err := unix.Stat(image, &img); err != nil {
		t.Fatal(err)
	}
	if used := img.Blocks * 512; used > 4<<20 {
		t.Errorf("fresh image of %d bytes uses %d bytes of host disk", size, used)
	}

	// Filling it fills only it.
	f, err := os.Create(filepath.Join(target, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	var werr error
	for range 2 * size / len(chunk) {
		if _, werr = f.Write(chunk); werr != nil {
			break
		}
	}
	if werr == nil {
		werr = f.Sync()
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Errorf("writing twice the workspace's size: %v, want ENOSPC", werr)
	}

	if err := Unmount(target); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	if src := mountSource(t, target); src != "" {
		t.Errorf("still mounted from %s after Unmount", src)
	}
	waitFor(t, "the loop device to detach", func() bool { return backing(dev) != image })
	if err := Unmount(target); err != nil {
		t.Errorf("Unmount of what is no longer mounted: %v", err)
	}
	if err := Unmount(filepath.Join(dir, "none")); err != nil {
		t.Errorf("Unmount of a missing directory: %v", err)
	}
}

func TestFormatRefuses(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.img")
	if err := os.WriteFile(existing, []byte("someone's"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		image string
		size  int64
	}{
		{"below the minimum", filepath.Join(dir, "small.img"), MinSize - 1},
		{"image exists", existing, MinSize},
		{"no directory", filepath.Join(dir, "none", "ws.img"), MinSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loop, err := Format(tt.image, tt.size, 0, 0)
			if err == nil {
				dev := loop.Name()
				loop.Close()
				detach(dev, tt.image)
				t.Fatal("Format succeeded")
			}
		})
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "someone's" {
		t.Errorf("an existing file was changed: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "small.img")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused size left an image: %v", err)
	}
}

// TestFormatDetachesOnClose: the device Format returns goes when its
// last user closes it, so a provider that crashes leaks no device.
func TestFormatDetachesOnClose(t *testing.T) {
	image := filepath.Join(t.TempDir(), "ws.img")
	loop, err := Format(image, MinSize, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev := loop.Name()
	t.Cleanup(func() { detach(dev, image) })
	if backing(dev) != image {
		t.Fatalf("%s is backed by %q, want %s", dev, backing(dev), image)
	}
	loop.Close()
	waitFor(t, "the loop device to detach", func() bool { return backing(dev) != image })
}
