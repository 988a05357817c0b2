package snapshot

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sparseFile makes a file of size bytes holding data at the given
// offsets and holes elsewhere.
func sparseFile(t *testing.T, p string, size int64, data map[int64]string) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, s := range data {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
}

// checkSparse checks that p has size bytes, data at the offsets, zeros
// elsewhere, and takes at most maxDisk bytes on disk. It reads the data
// regions only: that the rest is zeros is what SEEK_DATA says.
func checkSparse(t *testing.T, p string, size int64, data map[int64]string, maxDisk int64) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Size() != size {
		t.Errorf("%s: %d bytes, want %d", p, fi.Size(), size)
	}
	if st.Blocks*512 > maxDisk {
		t.Errorf("%s: %d bytes on disk, want at most %d", p, st.Blocks*512, maxDisk)
	}
	// Every data region of the copy is read: it must hold the data
	// written at those offsets and zeros elsewhere.
	want := func(off int64) byte {
		for o, s := range data {
			if off >= o && off < o+int64(len(s)) {
				return s[off-o]
			}
		}
		return 0
	}
	fd := int(f.Fd())
	found := map[int64]bool{}
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err != nil {
			break
		}
		h, _ := unix.Seek(fd, d, unix.SEEK_HOLE)
		buf := make([]byte, h-d)
		if _, err := f.ReadAt(buf, d); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		for i, c := range buf {
			if c != want(d+int64(i)) {
				t.Fatalf("%s: byte %d is %d, want %d", p, d+int64(i), c, want(d+int64(i)))
			}
		}
		for o := range data {
			if o >= d && o < h {
				found[o] = true
			}
		}
		off = h
	}
	if len(found) != len(data) {
		t.Errorf("%s: data found at %d of the %d offsets", p, len(found), len(data))
	}
}

// TestDaemonSparseAndHardLinks: a 3 GiB sparse file with a few extents,
// and a file of 21 names, saved from a workspace and restored into
// another: the copy takes little disk, holds the same bytes, and the 21
// names are one inode.
func TestDaemonSparseAndHardLinks(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	to, wsTo := serveDaemon(t)
	const size = 3 << 30
	data := map[int64]string{0: strings.Repeat("head", 1<<18), 1 << 30: "middle", size - 5: "tail!"}
	sparseFile(t, filepath.Join(wsFrom, "sparse.img"), size, data)
	links := randomBytes(7, 1<<20)
	writeFile(t, filepath.Join(wsFrom, "h/f0"), links, 0o644, time.Now())
	for i := 1; i <= 20; i++ {
		if err := os.Link(filepath.Join(wsFrom, "h/f0"), filepath.Join(wsFrom, "h", "f"+string(rune('a'+i)))); err != nil {
			t.Fatal(err)
		}
	}

	src := &daemonSource{c: from}
	s, _ := newStore(t)
	info := mustSave(t, s, src, SaveOptions{})
	if src.sent.Load() > 8<<20 {
		t.Errorf("the export of a sparse file with 1 MiB of data and 21 names of a 1 MiB file took %d bytes", src.sent.Load())
	}
	if info.Stored > 4<<20 {
		t.Errorf("the snapshot stored %d bytes", info.Stored)
	}
	rc, err := s.Open(t.Context(), info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := to.Import(t.Context(), rc); err != nil {
		t.Fatalf("Import: %v", err)
	}
	checkSparse(t, filepath.Join(wsTo, "sparse.img"), size, data, 4<<20)
	fi, err := os.Stat(filepath.Join(wsTo, "h/f0"))
	if err != nil {
		t.Fatal(err)
	}
	if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 21 {
		t.Errorf("h/f0 has %d names after the restore, want 21", n)
	}
	b, _ := os.ReadFile(filepath.Join(wsTo, "h/fu"))
	if sha256.Sum256(b) != sha256.Sum256(links) {
		t.Error("h/fu does not hold h/f0's bytes")
	}
}
