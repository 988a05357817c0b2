package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/sparsetar"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandboxd"
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
	offs := slices.Sorted(maps.Keys(data))
	want := func(off int64) byte {
		i, found := slices.BinarySearch(offs, off)
		if !found {
			i--
		}
		if i >= 0 && off < offs[i]+int64(len(data[offs[i]])) {
			return data[offs[i]][off-offs[i]]
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
		i, _ := slices.BinarySearch(offs, d)
		for ; i < len(offs) && offs[i] < h; i++ {
			found[offs[i]] = true
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

// cpuBudget returns a context cancelled once this process has used more
// than budget of CPU time from now, and a function saying how much it
// has used: cost is measured, not duration.
func cpuBudget(t *testing.T, budget time.Duration) (context.Context, func() time.Duration) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	used := func() time.Duration { return cpu() - start }
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if u := used(); u > budget {
					cancel(fmt.Errorf("this process used %s of CPU, more than the %s allowed", u.Round(time.Millisecond), budget))
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		cancel(nil)
	})
	return ctx, used
}

// TestDaemonSparseCost: a 15 TiB file with three runs of data, and a
// file of 10,000 runs of 4 KiB, exported by the daemon, saved, restored
// and imported by another daemon (all in this process) cost the CPU of
// their data, not of their size, and come back sparse. Holes read as
// zeros took half an hour.
func TestDaemonSparseCost(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	to, wsTo := serveDaemon(t)
	const size = 15 << 40
	big := map[int64]string{0: "head", 7 << 40: "middle", size - 4: "tail"}
	sparseFile(t, filepath.Join(wsFrom, "big.img"), size, big)
	many := map[int64]string{}
	for i := range int64(10000) {
		many[i<<26] = strings.Repeat(string(rune('a'+i%26)), 4096)
	}
	sparseFile(t, filepath.Join(wsFrom, "many.img"), 10000<<26, many)

	ctx, used := cpuBudget(t, 20*time.Second)
	s, _ := newStore(t)
	info, err := s.Save(ctx, &daemonSource{c: from}, SaveOptions{})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	m, err := s.loadManifest(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.entries {
		if e.Path == "big.img" && len(e.Chunks) > 6 {
			t.Errorf("big.img is %d chunk references, want its 3 runs of data and the holes between", len(e.Chunks))
		}
	}
	rc, err := s.Open(ctx, info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := to.Import(ctx, rc); err != nil {
		t.Fatalf("Import: %v", err)
	}
	t.Logf("export, save, restore and import of 15.6 TiB holding 40 MiB: %s of CPU", used())
	checkSparse(t, filepath.Join(wsTo, "big.img"), size, big, 1<<20)
	checkSparse(t, filepath.Join(wsTo, "many.img"), 10000<<26, many, 64<<20)
}

// sparseTar is a tar stream of one sparse file, written as the daemon
// writes it.
func sparseTar(t *testing.T, name string, size int64, ext []sparsetar.Extent, data func(sparsetar.Extent) []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	dw, err := sparsetar.WriteHeader(tw, &b, &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: time.Unix(1e9, 0)}, ext)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ext {
		dw.Write(data(x))
	}
	if err := dw.Close(); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return b.Bytes()
}

// TestSaveSparseChunks: a sparse file's data is cut into chunks at the
// offsets a whole file's are (multiples of 4 MiB), and each hole is one
// reference, whatever its length; the restored stream is a sparse entry
// with the same extents and data.
func TestSaveSparseChunks(t *testing.T) {
	const size = 64 << 30
	ext := []sparsetar.Extent{{Off: 0, Len: 10 << 20}, {Off: 32<<30 + 3<<20, Len: 6 << 20}}
	fill := func(x sparsetar.Extent) []byte { return randomBytes(uint64(x.Off), int(x.Len)) }
	s, _ := newStore(t)
	info := mustSave(t, s, tarSource{sparseTar(t, "f", size, ext, fill)}, SaveOptions{})
	m, err := s.loadManifest(t.Context(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	type piece struct {
		len  int64
		hole bool
	}
	var got []piece
	for _, r := range m.entries[0].Chunks {
		got = append(got, piece{r.Len, r.hole()})
	}
	want := []piece{
		{4 << 20, false}, {4 << 20, false}, {2 << 20, false},
		{32<<30 + 3<<20 - 10<<20, true},
		{1 << 20, false}, {4 << 20, false}, {1 << 20, false},
		{size - (32<<30 + 9<<20), true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("chunk references (length, hole):\n got %v\nwant %v", got, want)
	}

	rc, err := s.Open(t.Context(), info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := sparsetar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	gotExt, ok := tr.Extents()
	if hdr.Size != size || !ok || !slices.Equal(gotExt, ext) {
		t.Fatalf("restored: %d bytes, sparse %v, extents %v; want %d, %v", hdr.Size, ok, gotExt, int64(size), ext)
	}
	for _, x := range ext {
		b := make([]byte, x.Len)
		if _, err := io.ReadFull(tr, b); err != nil || !bytes.Equal(b, fill(x)) {
			t.Errorf("restored extent at %d differs (%v)", x.Off, err)
		}
	}
}

// TestSaveApparentBounds: files past the bounds on size, holes included,
// are left out with a note, before any of their data is read; the
// others are kept.
func TestSaveApparentBounds(t *testing.T) {
	one := func(x sparsetar.Extent) []byte { return bytes.Repeat([]byte{1}, int(x.Len)) }
	var stream []byte
	for _, f := range []struct {
		name string
		size int64
	}{{"a", 3 << 40}, {"b", 5 << 40}, {"c", 3 << 40}, {"d", 1 << 40}} {
		b := sparseTar(t, f.name, f.size, []sparsetar.Extent{{Off: f.size - 4096, Len: 4096}}, one)
		stream = append(stream, b[:len(b)-1024]...) // without the end-of-archive blocks
	}
	stream = append(stream, make([]byte, 1024)...)
	s, _ := newStore(t, WithMaxFileSize(4<<40), WithMaxTotalSize(6<<40))
	info := mustSave(t, s, tarSource{stream}, SaveOptions{})
	// b is larger than a file may be; d would take the total past 6 TiB.
	if info.Skipped != 2 || len(info.SkippedPaths) != 2 ||
		!strings.HasPrefix(info.SkippedPaths[0], `"b": `) || !strings.HasPrefix(info.SkippedPaths[1], `"d": `) {
		t.Errorf("skipped %d: %q; want b and d", info.Skipped, info.SkippedPaths)
	}
	if info.Files != 2 || info.Size != 6<<40 {
		t.Errorf("kept %d files of %d bytes, want a and c, 6 TiB", info.Files, info.Size)
	}
}

// TestDaemonFragmentedFiles: a file of more runs of data than a sparse
// entry carries is sent with its smallest holes merged, when that costs
// little, and restored the same; one whose runs are far apart is left
// out with a note, for the CPU of its data, rather than sent with its
// terabyte of holes as zeros.
func TestDaemonFragmentedFiles(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	to, wsTo := serveDaemon(t)
	const runs = 20000
	clustered := map[int64]string{1 << 40: "far"}
	scattered := map[int64]string{}
	for i := range int64(runs) {
		clustered[i*8192] = strings.Repeat(string(rune('a'+i%26)), 4096)
		scattered[i<<26] = strings.Repeat(string(rune('a'+i%26)), 4096)
	}
	sparseFile(t, filepath.Join(wsFrom, "clustered.img"), 2<<40, clustered)
	sparseFile(t, filepath.Join(wsFrom, "scattered.img"), runs<<26, scattered)

	ctx, used := cpuBudget(t, 20*time.Second)
	s, _ := newStore(t)
	info, err := s.Save(ctx, &daemonSource{c: from}, SaveOptions{})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if info.Skipped != 1 || !strings.HasPrefix(info.SkippedPaths[0], `"scattered.img": left out by the source: `) {
		t.Errorf("Save left out %d paths: %q; want scattered.img, with why", info.Skipped, info.SkippedPaths)
	}
	rc, err := s.Open(ctx, info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := to.Import(ctx, rc); err != nil {
		t.Fatalf("Import: %v", err)
	}
	t.Logf("%s of CPU", used())
	checkSparse(t, filepath.Join(wsTo, "clustered.img"), 2<<40, clustered, 256<<20)
	if _, err := os.Lstat(filepath.Join(wsTo, "scattered.img")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("scattered.img was restored (%v)", err)
	}
}

// servedSandbox is a sandbox served by an in-process daemon.
type servedSandbox struct{ sandboxd.Served }

func (servedSandbox) ID() string { return "served" }
func (servedSandbox) Info(context.Context) (provider.Info, error) {
	return provider.Info{}, nil
}
func (servedSandbox) Destroy(context.Context) error { return nil }

// TestUnchangedSparseFromParentMissing: a sparse file the parent left
// out (past its bounds) and that has not changed since is read again,
// through an export of it alone: its data, not its 15 TiB.
func TestUnchangedSparseFromParentMissing(t *testing.T) {
	c, ws := serveDaemon(t)
	sb := servedSandbox{sandboxd.Served{Client: c, Ready: func() error { return nil }, Check: func(err error) error { return err }}}
	const size = 15 << 40
	data := map[int64]string{0: "head", 7 << 40: "middle", size - 4: "tail"}
	sparseFile(t, filepath.Join(ws, "big.img"), size, data)
	writeFile(t, filepath.Join(ws, "small"), []byte("small"), 0o644, time.Now())

	b, _ := newBucket(t)
	// The parent starts, by its clock, well after the files last changed:
	// the second save is sent them unchanged.
	narrow := New(b, WithMaxFileSize(1<<40), withClock(func() time.Time { return time.Now().Add(time.Minute) }))
	parent := mustSave(t, narrow, SandboxSource(sb), SaveOptions{Source: "served"})
	if parent.Skipped != 1 {
		t.Fatalf("the parent left out %q, want big.img", parent.SkippedPaths)
	}
	ctx, used := cpuBudget(t, 20*time.Second)
	info, err := New(b).Save(ctx, SandboxSource(sb), SaveOptions{Parent: parent.ID, Source: "served"})
	if err != nil {
		t.Fatalf("Save: %v (%s of CPU)", err, used())
	}
	if info.Skipped != 0 || info.Files != 2 {
		t.Fatalf("the second save kept %d files, left out %q", info.Files, info.SkippedPaths)
	}
	to, wsTo := serveDaemon(t)
	rc, err := New(b).Open(ctx, info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := to.Import(ctx, rc); err != nil {
		t.Fatal(err)
	}
	checkSparse(t, filepath.Join(wsTo, "big.img"), size, data, 1<<20)
}

// TestLeftOutWithLinks: a file the source left out, and its other
// names, are left out with a note; the snapshot does not fail, and an
// import of the source's stream makes none of them.
func TestLeftOutWithLinks(t *testing.T) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{provider.PAXSkipped: "too large to read"}})
	tw.WriteHeader(&tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"})
	tw.WriteHeader(&tar.Header{Name: "c", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("c"))
	tw.Close()

	s, _ := newStore(t)
	info := mustSave(t, s, tarSource{b.Bytes()}, SaveOptions{})
	if info.Skipped != 2 || info.Files != 1 ||
		!strings.HasPrefix(info.SkippedPaths[0], `"a": left out by the source: too large`) || !strings.HasPrefix(info.SkippedPaths[1], `"b": `) {
		t.Errorf("kept %d files, left out %d: %q; want c kept, a and b left out", info.Files, info.Skipped, info.SkippedPaths)
	}
	c, ws := serveDaemon(t)
	if err := c.Import(t.Context(), bytes.NewReader(b.Bytes())); err != nil {
		t.Fatalf("Import: %v", err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := os.Lstat(filepath.Join(ws, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the import made %s (%v)", name, err)
		}
	}
}
