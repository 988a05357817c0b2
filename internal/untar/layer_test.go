package untar

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func layer(t *testing.T, root string, entries ...ent) error {
	t.Helper()
	return Extract(tarOf(t, entries...), root, Options{Layer: true})
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestLayers: layers applied in order, with whiteouts, opaque
// directories, links resolved in the image, and special mode bits kept.
func TestLayers(t *testing.T) {
	h := newHost(t)
	root := filepath.Join(h.dst, "root")
	suid := file("usr/bin/su", "su")
	suid.mode = 0o6755
	tmp := dir("tmp/")
	tmp.mode = 0o1777
	if err := layer(t, root, dir("etc/"), file("etc/a", "a"), file("etc/b", "b"), dir("etc/d/"), file("etc/d/x", "x"),
		dir("opt/"), file("opt/old", "old"), dir("opt/keep/"), file("opt/keep/lower", "l"), dir("usr/"), dir("usr/bin/"), suid, tmp,
		symlink("bin", "usr/bin"), symlink("etc/abs", "/usr/bin/su"), file("data", "d"), dir("was-dir/"), file("was-dir/f", "f")); err != nil {
		t.Fatal(err)
	}
	// Layer 2: remove etc/a and etc/d, empty opt but for what this layer
	// puts there, a file over a directory, a hard link to layer 1's file.
	if err := layer(t, root, file("etc/.wh.a", ""), file("etc/.wh.d", ""), file("opt/new", "new"), dir("opt/keep/"), file("opt/keep/upper", "u"), file("opt/.wh..wh..opq", ""),
		file(".wh..wh.plnk", ""), file("mine", "this layer's"), file(".wh.mine", ""),
		file("was-dir", "now a file"), hardlink("hl", "data"), file(".wh.nothing-there", "")); err != nil {
		t.Fatal(err)
	}
	if got := names(t, filepath.Join(root, "etc")); !slices.Equal(got, []string{"abs", "b"}) {
		t.Errorf("etc after whiteouts: %v", got)
	}
	if got := names(t, filepath.Join(root, "opt")); !slices.Equal(got, []string{"keep", "new"}) {
		t.Errorf("opt after the opaque marker: %v", got)
	}
	if got := names(t, filepath.Join(root, "opt/keep")); !slices.Equal(got, []string{"upper"}) {
		t.Errorf("opt/keep after the opaque marker above it: %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(root, "mine")); err != nil || string(b) != "this layer's" {
		t.Errorf("a whiteout removed its own layer's file: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "was-dir")); err != nil || string(b) != "now a file" {
		t.Errorf("a file over a directory: %q, %v", b, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "etc/abs")); err != nil || target != "/usr/bin/su" {
		t.Errorf("absolute link in the image: %q, %v", target, err)
	}
	// A set-user-id root program on the host is anyone's way to the
	// owner's uid: the host's copy has none.
	if fi, err := os.Stat(filepath.Join(root, "usr/bin/su")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("usr/bin/su (0o6755 in the layer): %v, %v; want 0755, no set-id bits", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("sticky /tmp: %v, %v", fi, err)
	}
	a, _ := os.Stat(filepath.Join(root, "data"))
	b, _ := os.Stat(filepath.Join(root, "hl"))
	if a == nil || b == nil || !os.SameFile(a, b) {
		t.Errorf("hl is not a hard link of layer 1's data")
	}
	h.check(t)
}

// TestLayerOwners: owners are given as Owner maps the headers' ids.
func TestLayerOwners(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("chown needs root: the tests run as root")
	}
	root := filepath.Join(t.TempDir(), "root")
	b := tarOf(t, dir("home/"), file("home/f", "x"), symlink("home/l", "f"))
	var seen [][2]int
	err := Extract(b, root, Options{Layer: true, Owner: func(uid, gid int) (int, int) {
		seen = append(seen, [2]int{uid, gid})
		return uid + 100000, gid + 100000
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"home", "home/f", "home/l"} {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 100000 || st.Gid != 100000 {
			t.Errorf("%s owned by %d:%d, want 100000:100000", p, st.Uid, st.Gid)
		}
	}
	if len(seen) == 0 {
		t.Error("Owner was not asked")
	}
}

// TestLayerHostile: what a layer may not do is refused whole, and
// nothing outside the root is touched.
func TestLayerHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []ent
	}{
		{"dot-dot", []ent{file("../outside/victim", "x")}},
		{"absolute link then file", []ent{symlink("l", "/tmp"), file("l/victim", "x")}},
		{"relative link then file", []ent{symlink("l", "../outside"), file("l/victim", "x")}},
		{"link then whiteout", []ent{symlink("l", "../outside"), file("l/.wh.x", "")}},
		{"hard link out", []ent{hardlink("h", "../outside.txt")}},
		{"hard link to nothing", []ent{hardlink("h", "nothing")}},
		{"whiteout of dot-dot", []ent{dir("d/"), file("d/.wh...", "")}},
		{"whiteout of dot", []ent{file(".wh..", "")}},
		{"char device", []ent{{name: "null", typ: tar.TypeChar}}},
		{"block device", []ent{{name: "sda", typ: tar.TypeBlock}}},
		{"root not a dir", []ent{file(".", "x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost(t)
			os.WriteFile(filepath.Join(h.outDir, "x"), nil, 0o644)
			err := layer(t, h.dst, tc.entries...)
			if !errors.Is(err, ErrBadArchive) {
				t.Errorf("Extract: %v, want a bad archive", err)
			}
			os.Remove(filepath.Join(h.outDir, "x"))
			h.check(t)
		})
	}
}
