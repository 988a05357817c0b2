package snapshot

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"golang.org/x/sys/unix"
)

// newBucket opens a file:// bucket in a temporary directory and returns
// it with that directory.
func newBucket(t testing.TB) (*blob.Bucket, string) {
	t.Helper()
	dir := t.TempDir()
	b, err := fileblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, dir
}

func newStore(t testing.TB, opts ...Option) (*Store, string) {
	t.Helper()
	b, dir := newBucket(t)
	return New(b, opts...), dir
}

// tarEntry is what a tar stream says about one entry, contents hashed.
type tarEntry struct {
	Name     string
	Type     byte
	Mode     int64
	MTime    int64
	Size     int64
	Linkname string
	Sum      string
}

// readTar lists a tar stream's entries.
func readTar(t testing.TB, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading tar: %v", err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, tr); err != nil {
			t.Fatalf("reading %s: %v", hdr.Name, err)
		}
		out = append(out, tarEntry{hdr.Name, hdr.Typeflag, hdr.Mode, hdr.ModTime.UnixNano(), hdr.Size, hdr.Linkname, hex.EncodeToString(h.Sum(nil))})
	}
}

// exportTar lists what a dirSource sends for dir, every file whole.
func exportTar(t testing.TB, dir string) []tarEntry {
	t.Helper()
	rc, err := (&dirSource{dir: dir}).Export(t.Context(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

// openTar lists the tar stream of snapshot id.
func openTar(t testing.TB, s *Store, id string) []tarEntry {
	t.Helper()
	rc, err := s.Open(t.Context(), id, nil)
	if err != nil {
		t.Fatalf("Open(%s): %v", id, err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

func diffEntries(t testing.TB, want, got []tarEntry) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%d entries, want %d", len(got), len(want))
	}
	for i := range min(len(want), len(got)) {
		if want[i] != got[i] {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// untar unpacks a tar stream into dir as provider Import does: parents
// made as needed, symbolic links after everything else, directory modes
// and times after their contents. Symbolic links get their mtimes too,
// so that the result can be compared with the original.
func untar(t testing.TB, r io.Reader, dir string) {
	t.Helper()
	type later struct {
		hdr  *tar.Header
		path string
	}
	var links, dirs []later
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(hdr.Name) {
			t.Fatalf("entry %q leaves the directory", hdr.Name)
		}
		p := filepath.Join(dir, hdr.Name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, later{hdr, p})
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(f, tr)
			if err == nil {
				err = f.Chmod(mode)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Chtimes(p, hdr.ModTime, hdr.ModTime)
			}
			if err != nil {
				t.Fatal(err)
			}
		case tar.TypeLink:
			if err := os.Link(filepath.Join(dir, hdr.Linkname), p); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			links = append(links, later{hdr, p})
		default:
			t.Fatalf("entry %q of type %q", hdr.Name, hdr.Typeflag)
		}
	}
	for _, l := range links {
		if err := os.Symlink(l.hdr.Linkname, l.path); err != nil {
			t.Fatal(err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(l.hdr.ModTime.UnixNano()), unix.NsecToTimespec(l.hdr.ModTime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, l.path, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.Chmod(d.path, fs.FileMode(d.hdr.Mode).Perm()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(d.path, d.hdr.ModTime, d.hdr.ModTime); err != nil {
			t.Fatal(err)
		}
	}
}

// writeFile writes a file with a given mtime.
func writeFile(t testing.TB, path string, data []byte, mode fs.FileMode, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// randomBytes returns n bytes that do not compress, the same for a seed.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// trickyTree makes a tree with what a workspace may hold and a snapshot
// must keep: nested and empty directories, an empty file, symbolic links
// (relative, absolute, dangling), a hard link, an executable, names with
// spaces and non-ASCII letters, and a 20 MiB file.
func trickyTree(t testing.TB, dir string) {
	t.Helper()
	mt := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	writeFile(t, filepath.Join(dir, "src/main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644, mt)
	writeFile(t, filepath.Join(dir, "src/deep/er/still/file.txt"), []byte("deep"), 0o600, mt.Add(time.Second))
	writeFile(t, filepath.Join(dir, "bin/run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755, mt)
	writeFile(t, filepath.Join(dir, "empty"), nil, 0o644, mt)
	writeFile(t, filepath.Join(dir, "with space/ünïcödé 文件.txt"), []byte("odd names"), 0o644, mt)
	writeFile(t, filepath.Join(dir, "big.bin"), append(randomBytes(1, 12<<20), make([]byte, 8<<20)...), 0o644, mt)
	writeFile(t, filepath.Join(dir, "dup-a.txt"), []byte("same contents"), 0o644, mt)
	writeFile(t, filepath.Join(dir, "dup-b.txt"), []byte("same contents"), 0o644, mt)
	if err := os.MkdirAll(filepath.Join(dir, "empty-dir/inner-empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "src/main.go"), filepath.Join(dir, "src/hard-link.go")); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"link-rel": "src/main.go", "link-abs": "/etc/hostname", "link-dangling": "no/such/file"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Directory times last, after their contents stopped changing.
	for _, d := range []string{"src/deep", "empty-dir/inner-empty", "empty-dir", "with space"} {
		if err := os.Chtimes(filepath.Join(dir, d), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
}

func mustSave(t testing.TB, s *Store, src Source, opts SaveOptions) Info {
	t.Helper()
	info, err := s.Save(t.Context(), src, opts)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	return info
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v, want one wrapping %v", err, target)
	}
}
