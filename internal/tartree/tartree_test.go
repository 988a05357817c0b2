package tartree

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// entries lists an archive's entries as "type name [-> link] [data]".
func entries(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		e := string(hdr.Typeflag) + " " + hdr.Name
		if hdr.Linkname != "" {
			e += " -> " + hdr.Linkname
		}
		if len(data) > 0 {
			e += " " + string(data)
		}
		out = append(out, e)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	top := filepath.Join(dir, "top")
	for _, d := range []string{"top/b", "top/a"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(top, "a", "f"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(top, "a", "f"), filepath.Join(top, "b", "g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/f", filepath.Join(top, "l")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(top, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("top", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, tc := range []struct {
		name string
		fsys FS
		top  string
		opts Options
		want []string
	}{
		{"host, copies", Host{}, top, Options{Name: func(rel string) string { return filepath.Join("dst", rel) }},
			[]string{"5 dst/", "5 dst/a/", "0 dst/a/f hi", "5 dst/b/", "0 dst/b/g hi", "2 dst/l -> a/f"}},
		{"root, hard links", root, "top", Options{HardLinks: true},
			[]string{"5 a/", "0 a/f hi", "5 b/", "1 b/g -> a/f", "2 l -> a/f"}},
		{"top a link, written", root, "link", Options{Name: func(rel string) string { return filepath.Join("link", rel) }},
			[]string{"2 link -> top"}},
		{"top a link, followed", root, "link", Options{FollowTop: true, Name: func(rel string) string {
			if rel == "." {
				return "x"
			}
			return "x/" + rel
		}}, []string{"5 x/", "5 x/a/", "0 x/a/f hi", "5 x/b/", "0 x/b/g hi", "2 x/l -> a/f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tc.fsys, tc.top, tc.opts); err != nil {
				t.Fatal(err)
			}
			if got := entries(t, b.Bytes()); !slices.Equal(got, tc.want) {
				t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// vanishing is a tree whose links and directories below the top are
// removed as they are reached.
type vanishing struct{ Host }

func (vanishing) Readlink(string) (string, error) { return "", os.ErrNotExist }

func (v vanishing) OpenFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	if filepath.Base(name) == "d" {
		return nil, os.ErrNotExist
	}
	return v.Host.OpenFile(name, flag, perm)
}

// TestWriteLive checks that what vanishes from a live tree while it is
// written is left out, and that it fails any other.
func TestWriteLive(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, vanishing{}, dir, Options{Live: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := entries(t, b.Bytes()), []string{"5 d/"}; !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
	if err := Write(io.Discard, vanishing{}, dir, Options{}); err == nil {
		t.Error("a tree that is not live wrote what vanished")
	}
}
