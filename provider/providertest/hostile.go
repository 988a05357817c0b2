package providertest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// hostileTests hold a provider to what a sandbox can put in its own
// workspace to hurt the host that reads it: special files, names that are
// not UTF-8, very deep paths, sparse files and hard links that would grow
// when copied.
func hostileTests() []test {
	return []test{
		{name: "FifoRead", fn: testFifoRead},
		{name: "FifoExport", fn: testFifoExport},
		{name: "HardLinks", fn: testHardLinks},
		{name: "Sparse", fn: testSparse},
		// Serial: it measures this process's CPU.
		{name: "SparseSnapshot", serial: true, fn: testSparseSnapshot},
		{name: "OddNames", fn: testOddNames},
	}
}

// specialTimeout bounds an operation on a special file: it must not wait
// on the file at all, so a few seconds is generous.
const specialTimeout = 20 * time.Second

// testFifoRead: reading, or listing, a fifo is refused at once, and the
// daemon keeps serving; a reader that blocked on the fifo would wait for a
// writer that never comes.
func testFifoRead(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, "mkfifo fifo && mkdir d && mkfifo d/fifo2 && ln -s d/fifo2 link")
	for _, p := range []string{"fifo", "d/fifo2", "link"} {
		ctx, cancel := context.WithTimeout(t.Context(), specialTimeout)
		rc, err := sb.ReadFile(ctx, p)
		if err == nil {
			rc.Close()
		}
		cancel()
		checkErrIs(t, err, errdefs.ErrBadInput, "ReadFile of a fifo "+p)
	}
	ctx, cancel := context.WithTimeout(t.Context(), specialTimeout)
	_, err := sb.ListDir(ctx, "fifo")
	cancel()
	checkErrIs(t, err, errdefs.ErrBadInput, "ListDir of a fifo")
	checkServing(t, sb)
}

// testFifoExport: an export of a tree holding a fifo completes, leaving
// the fifo out, and an export of the fifo itself completes too.
func testFifoExport(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, "mkdir d && echo x > d/a && mkfifo d/fifo && echo y > d/z")
	read := func(rc io.ReadCloser, err error) (map[string]*tar.Header, error) {
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
		if err != nil {
			return nil, err
		}
		return readTar(t, data), nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), specialTimeout)
	defer cancel()
	hdrs, err := read(sb.Export(ctx))
	if err != nil {
		t.Fatalf("Export of a workspace holding a fifo: %v", err)
	}
	for _, name := range []string{"d/a", "d/z"} {
		if hdrs[name] == nil {
			t.Errorf("Export of a workspace holding a fifo has no %s", name)
		}
	}
	if h := hdrs["d/fifo"]; h != nil && h.Typeflag != tar.TypeFifo {
		t.Errorf("Export has the fifo as an entry of type %q", h.Typeflag)
	}
	if pe, ok := sb.(provider.PathExporter); ok {
		hdrs, err := read(pe.ExportPath(ctx, "d/fifo"))
		if err != nil && !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("ExportPath of a fifo: %v, want success or ErrBadInput", err)
		}
		for name, h := range hdrs {
			if h.Typeflag == tar.TypeReg {
				t.Errorf("ExportPath of a fifo has a regular file %q", name)
			}
		}
	}
	checkServing(t, sb)
}

// testHardLinks: a file with 21 names is exported once, its other names
// as hard links, and imported as one file with 21 names.
func testHardLinks(t *testing.T, s *suite) {
	p, sb := s.sandbox(t)
	mustSh(t, sb, `mkdir h && head -c 1048576 /dev/urandom > h/f0 && for i in $(seq 1 20); do ln h/f0 h/f$i; done`)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	rc, err := sb.Export(ctx)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
	rc.Close()
	if err != nil {
		t.Fatalf("reading the export: %v", err)
	}
	regular, links := 0, 0
	for name, h := range readTar(t, data) {
		if !strings.HasPrefix(name, "h/f") {
			continue
		}
		switch h.Typeflag {
		case tar.TypeReg:
			regular++
		case tar.TypeLink:
			links++
		}
	}
	if regular != 1 || links != 20 {
		t.Errorf("the export of a file with 21 names has %d regular files and %d hard links, want 1 and 20", regular, links)
	}
	if len(data) > 2<<20 {
		t.Errorf("the export of 1 MiB with 21 names takes %d bytes", len(data))
	}
	dst := s.mustCreate(t, p, s.newSpec(t))
	if err := dst.Import(ctx, bytes.NewReader(data)); err != nil {
		t.Fatalf("Import: %v", err)
	}
	if out := mustSh(t, dst, "stat -c %h h/f0 h/f20 | sort -u"); strings.TrimSpace(out) != "21" {
		t.Errorf("after Import, the file has %q names, want 21", out)
	}
}

// testSparse: a 3 GiB file with a few bytes of data is exported small and
// imported small, holding the same bytes.
func testSparse(t *testing.T, s *suite) {
	p, sb := s.sandbox(t)
	mustSh(t, sb, `truncate -s 3G sparse.img && printf head | dd of=sparse.img conv=notrunc 2>/dev/null &&
printf middle | dd of=sparse.img bs=1 seek=1073741824 conv=notrunc 2>/dev/null && printf tail | dd of=sparse.img bs=1 seek=3221225468 conv=notrunc 2>/dev/null`)
	ctx, cancel := context.WithTimeout(t.Context(), heavyTimeout)
	defer cancel()
	rc, err := sb.Export(ctx)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
	rc.Close()
	if err != nil {
		t.Fatalf("reading the export: %v", err)
	}
	if len(data) > 1<<20 {
		t.Errorf("the export of a 3 GiB file holding 14 bytes takes %d bytes", len(data))
	}
	dst := s.mustCreate(t, p, s.newSpec(t))
	// What the import takes on disk is what the workspace's file system
	// says it uses after less before: gVisor computes a file's blocks
	// from its size.
	const used = `python3 -c 'import os; v = os.statvfs("."); print((v.f_blocks - v.f_bfree) * v.f_frsize)'`
	var before int64
	fmt.Sscan(mustSh(t, dst, used), &before)
	if err := dst.Import(ctx, bytes.NewReader(data)); err != nil {
		t.Fatalf("Import: %v", err)
	}
	// Size, bytes on disk, and the bytes at the three places.
	out := mustSh(t, dst, `stat -c '%s' sparse.img && `+used+` && dd if=sparse.img bs=1 count=4 2>/dev/null && echo &&
dd if=sparse.img bs=1 skip=1073741824 count=6 2>/dev/null && echo && dd if=sparse.img bs=1 skip=3221225468 count=4 2>/dev/null`)
	var size, after int64
	var head, mid, tail string
	fmt.Sscan(out, &size, &after, &head, &mid, &tail)
	if size != 3<<30 || after-before > 1<<20 || head != "head" || mid != "middle" || tail != "tail" {
		t.Errorf("after Import, the sparse file is %q, and the workspace uses %d bytes more: want 3221225472 bytes, at most 1 MiB more on disk, head middle tail", out, after-before)
	}
}

// testOddNames: names are bytes. Names that are not UTF-8 or hold a
// newline export and import whole.
func testOddNames(t *testing.T, s *suite) {
	p, sb := s.sandbox(t)
	mustSh(t, sb, `mkdir -p "$(printf 'd\377')" && printf x > "$(printf 'd\377/f\376')" && printf y > "$(printf 'new\nline')"`)
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	rc, err := sb.Export(ctx)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
	rc.Close()
	if err != nil {
		t.Fatalf("reading the export of odd names: %v", err)
	}
	hdrs := readTar(t, data)
	for _, name := range []string{"d\xff/f\xfe", "new\nline"} {
		if hdrs[name] == nil {
			t.Errorf("the export has no %q; it has %q", name, sortedKeys(hdrs))
		}
	}
	dst := s.mustCreate(t, p, s.newSpec(t))
	if err := dst.Import(ctx, bytes.NewReader(data)); err != nil {
		t.Fatalf("Import of odd names: %v", err)
	}
	if out := mustSh(t, dst, `cat "$(printf 'd\377/f\376')" "$(printf 'new\nline')"`); out != "xy" {
		t.Errorf("after Import, the files hold %q, want %q", out, "xy")
	}
}
