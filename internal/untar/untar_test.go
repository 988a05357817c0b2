package untar

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/sparsetar"
)

type ent struct {
	name, link, data string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...ent) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.data)), ModTime: time.Unix(1e9, 0), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.data))
	}
	tw.Close()
	return &b
}

func dir(name string) ent             { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func file(name, data string) ent      { return ent{name: name, typ: tar.TypeReg, data: data} }
func symlink(name, target string) ent { return ent{name: name, typ: tar.TypeSymlink, link: target} }
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target}
}

// host is a destination with the rest of the host beside it: a directory
// and a file no extraction may touch.
type host struct {
	dst, outDir, outFile string
}

func newHost(t *testing.T) host {
	base := t.TempDir()
	h := host{dst: filepath.Join(base, "dst"), outDir: filepath.Join(base, "outside"), outFile: filepath.Join(base, "outside.txt")}
	for _, d := range []string{h.dst, h.outDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(h.outFile, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

// check fails the test if anything outside the destination changed.
func (h host) check(t *testing.T) {
	t.Helper()
	entries, _ := os.ReadDir(h.outDir)
	for _, e := range entries {
		t.Errorf("written outside the destination: %s", filepath.Join(h.outDir, e.Name()))
	}
	if b, err := os.ReadFile(h.outFile); err != nil || string(b) != "host" {
		t.Errorf("the host file was changed: %q, %v", b, err)
	}
	if fi, err := os.Lstat(h.outFile); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the host file was replaced: %v, %v", fi, err)
	}
}

func TestExtract(t *testing.T) {
	h := newHost(t)
	target := filepath.Join(h.dst, "proj")
	exe := file("proj/run.sh", "#!/bin/sh\n")
	exe.mode = 0o755
	var warnings []string
	err := Extract(tarOf(t, dir("proj/"), dir("proj/a/"), file("proj/a/x.txt", "x"), exe, symlink("proj/l", "a/x.txt"),
		symlink("proj/a/up", "../run.sh"), hardlink("proj/a/hl", "proj/a/x.txt")), target, Options{Warn: func(name, why string) { warnings = append(warnings, name+": "+why) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	if b, err := os.ReadFile(filepath.Join(target, "l")); err != nil || string(b) != "x" {
		t.Errorf("through the link: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "a", "up")); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("through a/up: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(target, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 || fi.ModTime().Unix() != 1e9 {
		t.Errorf("run.sh: %v, %v", fi, err)
	}
	a, _ := os.Stat(filepath.Join(target, "a", "x.txt"))
	b, _ := os.Stat(filepath.Join(target, "a", "hl"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("a/hl is not a hard link of a/x.txt")
	}
	h.check(t)
}

// TestExtractHostile: archives that try to write outside the destination,
// or to make what must not be made.
func TestExtractHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []ent
		wantErr error // nil: unpacks, with what is bad skipped
		skipped []string
	}{
		{name: "dot-dot", entries: []ent{dir("p/"), file("p/../../outside/victim", "x")}, wantErr: ErrBadArchive},
		{name: "absolute name", entries: []ent{dir("p/"), file("/tmp/victim", "x")}, wantErr: ErrBadArchive},
		{name: "second top", entries: []ent{dir("p/"), file("q/victim", "x")}, wantErr: ErrBadArchive},
		{name: "absolute link", entries: []ent{dir("p/"), symlink("p/l", "/tmp")}, skipped: []string{"p/l"}},
		{name: "link up", entries: []ent{dir("p/"), symlink("p/l", "../outside")}, skipped: []string{"p/l"}},
		{name: "link up from below", entries: []ent{dir("p/"), symlink("p/a/l", "../../x")}, skipped: []string{"p/a/l"}},
		{name: "dot-dot after a link", entries: []ent{dir("p/"), symlink("p/self", "."), symlink("p/l", "self/../outside")}, skipped: []string{"p/l"}},
		{name: "link then file", entries: []ent{dir("p/"), symlink("p/l", "../.."), file("p/l/victim", "x")}, skipped: []string{"p/l"}},
		{name: "link then dir", entries: []ent{dir("p/"), symlink("p/l", "/tmp"), dir("p/l/sub/"), file("p/l/sub/victim", "x")}, skipped: []string{"p/l"}},
		{name: "inside link then file", entries: []ent{dir("p/"), dir("p/d/"), symlink("p/l", "d"), file("p/l/f", "x")}},
		{name: "hard link out", entries: []ent{dir("p/"), hardlink("p/h", "../outside.txt")}, wantErr: nil, skipped: []string{"p/h"}},
		{name: "hard link to a name not copied", entries: []ent{dir("p/"), hardlink("p/h", "p/nothing")}, skipped: []string{"p/h"}},
		{name: "hard link to a link", entries: []ent{dir("p/"), dir("p/d/"), symlink("p/l", "d"), hardlink("p/h", "p/l")}, skipped: []string{"p/h"}},
		{name: "fifo", entries: []ent{dir("p/"), {name: "p/fifo", typ: tar.TypeFifo}}, skipped: []string{"p/fifo"}},
		{name: "char device", entries: []ent{dir("p/"), {name: "p/null", typ: tar.TypeChar}}, skipped: []string{"p/null"}},
		{name: "block device", entries: []ent{dir("p/"), {name: "p/sda", typ: tar.TypeBlock}}, skipped: []string{"p/sda"}},
		{name: "top link", entries: []ent{symlink("p", "/")}, skipped: []string{"p"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			var skipped []string
			err := Extract(tarOf(t, tc.entries...), filepath.Join(h.dst, "p"), Options{Warn: func(name, _ string) { skipped = append(skipped, name) }})
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Extract: %v, want %v", err, tc.wantErr)
			}
			if strings.Join(skipped, ",") != strings.Join(tc.skipped, ",") {
				t.Errorf("skipped %q, want %q", skipped, tc.skipped)
			}
			h.check(t)
			filepath.WalkDir(h.dst, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				fi, _ := d.Info()
				switch {
				case fi.Mode()&fs.ModeSymlink != 0:
					target, _ := os.Readlink(p)
					if filepath.IsAbs(target) || strings.Contains(target, "..") {
						t.Errorf("%s: a link to %s was made", p, target)
					}
				case fi.Mode()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeCharDevice) != 0:
					t.Errorf("%s: a %v was made", p, fi.Mode().Type())
				}
				return nil
			})
		})
	}
}

// TestExtractPlanted: links already on the host, planted by an earlier
// copy, are replaced, never written through: at the target itself, at a
// directory of the tree, at a file of the tree.
func TestExtractPlanted(t *testing.T) {
	plant := func(t *testing.T, h host, name, to string) {
		t.Helper()
		p := filepath.Join(h.dst, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("target is a link to a directory", func(t *testing.T) {
		h := newHost(t)
		plant(t, h, "proj/build", h.outDir)
		if err := Extract(tarOf(t, dir("build/"), file("build/evil.txt", "X")), filepath.Join(h.dst, "proj", "build"), Options{}); err != nil {
			t.Fatal(err)
		}
		h.check(t)
		if b, err := os.ReadFile(filepath.Join(h.dst, "proj", "build", "evil.txt")); err != nil || string(b) != "X" {
			t.Errorf("build/evil.txt: %q, %v", b, err)
		}
	})
	t.Run("target is a link to a file", func(t *testing.T) {
		h := newHost(t)
		plant(t, h, "proj/result.txt", h.outFile)
		if err := Extract(tarOf(t, file("result.txt", "X")), filepath.Join(h.dst, "proj", "result.txt"), Options{}); err != nil {
			t.Fatal(err)
		}
		h.check(t)
		if fi, err := os.Lstat(filepath.Join(h.dst, "proj", "result.txt")); err != nil || !fi.Mode().IsRegular() {
			t.Errorf("result.txt: %v, %v", fi, err)
		}
	})
	t.Run("a parent in the tree is a link", func(t *testing.T) {
		h := newHost(t)
		plant(t, h, "proj/sub", h.outDir)
		if err := Extract(tarOf(t, dir("proj/"), dir("proj/sub/"), file("proj/sub/evil.txt", "X"), file("proj/sub2/evil.txt", "X")), filepath.Join(h.dst, "proj"), Options{}); err != nil {
			t.Fatal(err)
		}
		h.check(t)
	})
	t.Run("a parent implied by a file is a link", func(t *testing.T) {
		h := newHost(t)
		plant(t, h, "proj/sub", h.outDir)
		if err := Extract(tarOf(t, dir("proj/"), file("proj/sub/evil.txt", "X")), filepath.Join(h.dst, "proj"), Options{}); err != nil {
			t.Fatal(err)
		}
		h.check(t)
	})
	t.Run("a file of the tree is a link", func(t *testing.T) {
		h := newHost(t)
		plant(t, h, "proj/f", h.outFile)
		if err := Extract(tarOf(t, dir("proj/"), file("proj/f", "X")), filepath.Join(h.dst, "proj"), Options{}); err != nil {
			t.Fatal(err)
		}
		h.check(t)
	})
	t.Run("root mode", func(t *testing.T) {
		h := newHost(t)
		plant(t, h, "ws/a", h.outDir)
		plant(t, h, "ws/b", h.outFile)
		if err := Extract(tarOf(t, file("a/x", "X"), file("b", "X"), hardlink("c", "b")), filepath.Join(h.dst, "ws"), Options{Root: true}); err != nil {
			t.Fatal(err)
		}
		h.check(t)
	})
}

func TestExtractModes(t *testing.T) {
	h := newHost(t)
	suid := file("p/suid", "x")
	suid.mode = 0o6755
	sticky := dir("p/tmp/")
	sticky.mode = 0o1777
	if err := Extract(tarOf(t, dir("p/"), suid, sticky), filepath.Join(h.dst, "p"), Options{}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"suid": 0o755, "tmp": fs.ModeDir | 0o777} {
		fi, err := os.Lstat(filepath.Join(h.dst, "p", name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v (%v)", name, fi.Mode(), want, err)
		}
	}
}

func TestExtractLimits(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		h := newHost(t)
		err := Extract(tarOf(t, dir("p/"), file("p/a", "12345"), file("p/b", "12345")), filepath.Join(h.dst, "p"), Options{MaxBytes: 8})
		if !errors.Is(err, ErrLimit) {
			t.Errorf("Extract: %v, want ErrLimit", err)
		}
	})
	t.Run("entries", func(t *testing.T) {
		h := newHost(t)
		err := Extract(tarOf(t, dir("p/"), file("p/a", ""), file("p/b", ""), file("p/c", "")), filepath.Join(h.dst, "p"), Options{MaxEntries: 3})
		if !errors.Is(err, ErrLimit) {
			t.Errorf("Extract: %v, want ErrLimit", err)
		}
	})
	t.Run("a header larger than the budget is refused before its data", func(t *testing.T) {
		h := newHost(t)
		// The header claims 1 TiB; its data is cut short. Nothing may be
		// written for it: the size alone is over the budget.
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: "p", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644})
		tw.Write(make([]byte, 4096))
		err := Extract(&b, filepath.Join(h.dst, "p"), Options{})
		if !errors.Is(err, ErrLimit) {
			t.Errorf("Extract: %v, want ErrLimit", err)
		}
		if _, err := os.Lstat(filepath.Join(h.dst, "p")); err == nil {
			t.Error("the file was made")
		}
	})
	t.Run("a header size lie", func(t *testing.T) {
		h := newHost(t)
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		tw.WriteHeader(&tar.Header{Name: "p", Typeflag: tar.TypeReg, Size: 1 << 20, Mode: 0o644})
		tw.Write(make([]byte, 1000))
		err := Extract(&b, filepath.Join(h.dst, "p"), Options{})
		if !errors.Is(err, ErrBadArchive) {
			t.Errorf("Extract: %v, want ErrBadArchive", err)
		}
	})
}

// TestExtractSparse: a sparse entry, or a file of zeros, takes no more
// disk on the host than its data.
func TestExtractSparse(t *testing.T) {
	h := newHost(t)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	const size = 1 << 30
	dw, err := sparsetar.WriteHeader(tw, &b, &tar.Header{Name: "img", Mode: 0o644, Size: size}, []sparsetar.Extent{{Off: 1 << 20, Len: 4}})
	if err != nil {
		t.Fatal(err)
	}
	dw.Write([]byte("data"))
	dw.Close()
	tw.Close()
	target := filepath.Join(h.dst, "img")
	if err := Extract(&b, target, Options{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size || fi.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20 {
		t.Errorf("img: %d bytes, %d on disk", fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
	}
	f, _ := os.Open(target)
	defer f.Close()
	got := make([]byte, 4)
	f.ReadAt(got, 1<<20)
	if string(got) != "data" {
		t.Errorf("img holds %q at 1 MiB", got)
	}
}

// TestWriteDataRuns: runs of data and of zeros, in buffers that end
// mid-block, come out byte for byte, the zeros as holes, and each run
// of data with one write.
func TestWriteDataRuns(t *testing.T) {
	const block = sparsetar.BlockSize
	var want []byte
	data := bytes.Repeat([]byte{7}, 3*block+100)
	want = append(want, data...)
	want = append(want, make([]byte, 64*block)...) // a hole
	want = append(want, data...)
	want = append(want, make([]byte, 10)...) // zeros at the end
	for _, bufSize := range []int{block, 5*block + 3, 1 << 20} {
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		n, err := WriteData(int(f.Fd()), bytes.NewReader(want), make([]byte, bufSize))
		if err != nil || n != int64(len(want)) {
			t.Fatalf("buffer %d: WriteData: %d, %v", bufSize, n, err)
		}
		got, err := os.ReadFile(f.Name())
		f.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("buffer %d: the file differs (%d bytes, want %d; %v)", bufSize, len(got), len(want), err)
		}
		if n, zero := blockRun(want); n != 4*block || zero { // the fourth block holds 100 bytes of data
			t.Errorf("first run: %d bytes, zero %v; want %d of data", n, zero, 4*block)
		}
	}
}

// TestExtractHugeSparse: a sparse entry of 15 TiB with a few bytes of
// data is unpacked for the CPU of its data: its holes are neither read
// as zeros nor scanned, and stay holes. Read as zeros, they took half
// an hour.
func TestExtractHugeSparse(t *testing.T) {
	h := newHost(t)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	const size = 15 << 40
	ext := []sparsetar.Extent{{Off: 0, Len: 4}, {Off: 7 << 40, Len: 6}, {Off: size - 4, Len: 4}}
	dw, err := sparsetar.WriteHeader(tw, &b, &tar.Header{Name: "img", Mode: 0o644, Size: size}, ext)
	if err != nil {
		t.Fatal(err)
	}
	dw.Write([]byte("headmiddletail"))
	dw.Close()
	tw.Close()
	target := filepath.Join(h.dst, "img")

	done := make(chan error, 1)
	start := processCPU()
	go func() { done <- Extract(&b, target, Options{MaxBytes: size}) }()
	const budget = 10 * time.Second
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			break wait
		case <-tick.C:
			if used := processCPU() - start; used > budget {
				t.Fatalf("Extract used more than %s of CPU for 14 bytes of data", budget)
			}
		}
	}
	fi, err := os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size || fi.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20 {
		t.Errorf("img: %d bytes, %d on disk", fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks*512)
	}
	f, _ := os.Open(target)
	defer f.Close()
	for _, c := range []struct {
		off  int64
		want string
	}{{0, "head"}, {7 << 40, "middle"}, {size - 4, "tail"}} {
		got := make([]byte, len(c.want))
		f.ReadAt(got, c.off)
		if string(got) != c.want {
			t.Errorf("img holds %q at %d, want %q", got, c.off, c.want)
		}
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
