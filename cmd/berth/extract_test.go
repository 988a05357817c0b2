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

// TestExtractPlantedLinks replays issue 9's attack: a first copy out plants
// links to host paths, later copies write through them. Neither copy may
// touch anything outside the destination.
func TestExtractPlantedLinks(t *testing.T) {
	host := t.TempDir() // stands for the rest of the host
	hostDir := filepath.Join(host, "dir")
	hostFile := filepath.Join(host, "file")
	os.Mkdir(hostDir, 0o755)
	os.WriteFile(hostFile, []byte("host"), 0o644)
	dst := t.TempDir()

	// cp $SB:proj DST/: the links are refused or made harmless.
	_ = extractTar(tarOf(t, dir("proj/"), symlink("proj/build", hostDir), symlink("proj/result.txt", hostFile)), filepath.Join(dst, "proj"), false)
	// Plant them anyway, as an older berth did, and check that later
	// copies do not write through them.
	os.Remove(filepath.Join(dst, "proj", "build"))
	os.Remove(filepath.Join(dst, "proj", "result.txt"))
	if err := os.Symlink(hostDir, filepath.Join(dst, "proj", "build")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(dst, "proj", "result.txt")); err != nil {
		t.Fatal(err)
	}
	// cp $SB:proj/build DST/proj/
	err := extractTar(tarOf(t, dir("build/"), file("build/evil.txt", "X")), filepath.Join(dst, "proj", "build"), false)
	if err != nil {
		t.Errorf("copying build: %v", err)
	}
	// cp $SB:proj/result.txt DST/proj/
	err = extractTar(tarOf(t, file("result.txt", "X")), filepath.Join(dst, "proj", "result.txt"), false)
	if err != nil {
		t.Errorf("copying result.txt: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(hostDir, "evil.txt")); err == nil {
		t.Error("the copy wrote through the planted directory link")
	}
	if b, _ := os.ReadFile(hostFile); string(b) != "host" {
		t.Errorf("the copy wrote through the planted file link: the host file holds %q", b)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "proj", "build", "evil.txt")); err != nil || string(b) != "X" {
		t.Errorf("build/evil.txt: %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "proj", "result.txt")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("result.txt is not a regular file in place of the link: %v, %v", fi, err)
	}
}

// TestExtractFirstCopyPlantsNothing: links that leave what is copied are
// not made on the host.
func TestExtractFirstCopyPlantsNothing(t *testing.T) {
	dst := t.TempDir()
	err := extractTar(tarOf(t, dir("proj/"), symlink("proj/build", "/etc"), symlink("proj/up", "../.."), symlink("proj/ok", "sub/f")), filepath.Join(dst, "proj"), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"build", "up"} {
		if _, err := os.Lstat(filepath.Join(dst, "proj", name)); err == nil {
			t.Errorf("proj/%s, a link out of the copy, was made", name)
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "proj", "ok")); err != nil || target != "sub/f" {
		t.Errorf("proj/ok: %q, %v", target, err)
	}
}
