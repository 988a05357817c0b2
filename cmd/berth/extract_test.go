package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type entry struct {
	name, link, data string
	typ              byte
	mode             int64
}

func tarOf(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: mode, Size: int64(len(e.data)), ModTime: time.Unix(1e9, 0)}
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

func dir(name string) entry             { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func file(name, data string) entry      { return entry{name: name, typ: tar.TypeReg, data: data} }
func symlink(name, target string) entry { return entry{name: name, typ: tar.TypeSymlink, link: target} }

func TestExtractTar(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "out")
		exe := file("proj/run.sh", "#!/bin/sh\n")
		exe.mode = 0o755
		err := extractTar(tarOf(t, dir("proj/"), dir("proj/a/"), file("proj/a/x.txt", "x"), exe, symlink("proj/l", "a/x.txt")), target, false)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(target, "l")); err != nil || string(b) != "x" {
			t.Errorf("through the link: %q, %v", b, err)
		}
		if fi, err := os.Stat(filepath.Join(target, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 || fi.ModTime().Unix() != 1e9 {
			t.Errorf("run.sh: %v, %v", fi, err)
		}
	})
	t.Run("file", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "f")
		if err := extractTar(tarOf(t, file("name-in-sandbox", "content")), target, false); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(target); string(b) != "content" {
			t.Errorf("got %q", b)
		}
	})
	t.Run("workspace", func(t *testing.T) {
		target := t.TempDir()
		if err := extractTar(tarOf(t, file("a", "1"), dir("d/"), file("d/b", "2")), target, true); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(target, "d", "b")); string(b) != "2" {
			t.Errorf("got %q", b)
		}
	})

	// Hostile archives: nothing may be written outside the target.
	for name, entries := range map[string][]entry{
		"dot-dot":           {dir("p/"), file("p/../../victim", "x")},
		"absolute":          {dir("p/"), file("/tmp/victim", "x")},
		"link then file":    {dir("p/"), symlink("p/l", "../.."), file("p/l/victim", "x")},
		"absolute link":     {dir("p/"), symlink("p/l", "/tmp"), file("p/l/victim", "x")},
		"link then dir":     {dir("p/"), symlink("p/l", "/tmp"), dir("p/l/sub/"), file("p/l/sub/victim", "x")},
		"link over a file":  {dir("p/"), symlink("p/f", "../../victim"), file("p/f", "x")},
		"file then its dir": {file("p", "x"), file("p/victim", "x")},
	} {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			target := filepath.Join(base, "in", "out")
			os.MkdirAll(filepath.Dir(target), 0o755)
			err := extractTar(tarOf(t, entries...), target, false)
			var outside []string
			filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && !strings.HasPrefix(p, target+string(filepath.Separator)) && p != target {
					outside = append(outside, p)
				}
				return nil
			})
			if len(outside) > 0 {
				t.Errorf("written outside the target: %v (err %v)", outside, err)
			}
			if _, serr := os.Lstat("/tmp/victim"); serr == nil {
				os.Remove("/tmp/victim")
				t.Errorf("written to /tmp/victim (err %v)", err)
			}
		})
	}
}
