package tools

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/provider"
)

// tree reads a directory as path -> contents, with "+x" after the path
// of executables.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		if fi.Mode()&0o100 != 0 {
			rel += " +x"
		}
		out[rel] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyTree copies the files of src into a new directory, modes kept.
func copyTree(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(rel)), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, fi.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func patchCall(t testing.TB, patch string) chat.ToolCall {
	b, err := json.Marshal(map[string]string{"patch": patch})
	if err != nil {
		t.Fatal(err)
	}
	return chat.ToolCall{ID: "p", Name: ApplyPatch, Arguments: string(b)}
}

// The corpus holds real outputs of git diff and diff -u (made by
// testdata/gen.sh) with the trees before and after: each patch turns
// the one into the other.
func TestPatchCorpus(t *testing.T) {
	patches, err := filepath.Glob("testdata/patches/*.patch")
	if err != nil || len(patches) < 8 {
		t.Fatalf("corpus: %v %v", patches, err)
	}
	for _, p := range patches {
		name := strings.TrimSuffix(filepath.Base(p), ".patch")
		t.Run(name, func(t *testing.T) {
			patch, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			dir := copyTree(t, strings.TrimSuffix(p, ".patch")+".before")
			res := Run(Dir(dir), patchCall(t, string(patch)))
			if res.Failed {
				t.Fatalf("apply: %s", res.Output)
			}
			want := tree(t, strings.TrimSuffix(p, ".patch")+".after")
			if got := tree(t, dir); !maps.Equal(got, want) {
				t.Errorf("after the patch:\n%v\nwant:\n%v\n(%s)", got, want, res.Output)
			}
			// Applied again, it no longer applies, and changes nothing.
			before := tree(t, dir)
			if res := Run(Dir(dir), patchCall(t, string(patch))); !res.Failed {
				t.Errorf("the patch applied twice: %s", res.Output)
			}
			if got := tree(t, dir); !maps.Equal(got, before) {
				t.Errorf("a patch that failed changed the workspace")
			}
		})
	}
}

// A patch of which one file's hunk does not apply changes no file,
// not even those whose hunks do, and says which hunk failed.
func TestPatchAllOrNothing(t *testing.T) {
	patch, err := os.ReadFile("testdata/patches/git-modify.patch")
	if err != nil {
		t.Fatal(err)
	}
	dir := copyTree(t, "testdata/patches/git-modify.before")
	// pkg/a.go's hunk no longer applies; main.txt's would.
	if err := os.WriteFile(filepath.Join(dir, "pkg/a.go"), []byte("package pkg\n\nfunc A() int { return 7 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := tree(t, dir)
	res := Run(Dir(dir), patchCall(t, string(patch)))
	if !res.Failed || !strings.Contains(res.Output, "pkg/a.go") || !strings.Contains(res.Output, "hunk 1") || !strings.Contains(res.Output, "nothing changed") {
		t.Errorf("result %+v: want a failure naming pkg/a.go's hunk 1", res)
	}
	if got := tree(t, dir); !maps.Equal(got, before) {
		t.Errorf("a patch that did not apply changed files")
	}
}

// A patch written by hand, as a model does: no a/ and b/, hunk lines
// shifted from where the header says.
func TestPatchOffset(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f.txt"), []byte("a\nb\nc\nd\ne\n"), 0o644)
	patch := "--- f.txt\n+++ f.txt\n@@ -1,3 +1,3 @@\n c\n-d\n+D\n e\n"
	if res := Run(Dir(dir), patchCall(t, patch)); res.Failed {
		t.Fatal(res.Output)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != "a\nb\nc\nD\ne\n" {
		t.Errorf("after the patch: %q", b)
	}
	for _, bad := range []string{"", "not a patch", "--- ../x\n+++ ../x\n@@ -1 +1 @@\n-a\n+b\n", "--- f.txt\n+++ f.txt\n@@ -1,3 +1,3 @@\n c\n"} {
		if res := Run(Dir(dir), patchCall(t, bad)); !res.Failed {
			t.Errorf("patch %q applied: %s", bad, res.Output)
		}
	}
}

// FuzzApplyPatch: whatever the patch, applying it never panics, and
// either changes the workspace with one write (and the removals after
// it) or not at all.
func FuzzApplyPatch(f *testing.F) {
	patches, _ := filepath.Glob("testdata/patches/*.patch")
	for _, p := range patches {
		b, _ := os.ReadFile(p)
		f.Add(string(b), "line 5 of main\n")
	}
	f.Add("--- f.txt\n+++ f.txt\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n", "a\nb\n")
	f.Add("--- f.txt\n+++ f.txt\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n", "a")
	f.Fuzz(func(t *testing.T, patch, content string) {
		ws := &memWorkspace{files: map[string]provider.File{
			"f.txt": {Path: "f.txt", Data: []byte(content)}, "main.txt": {Path: "main.txt", Data: []byte(content)},
			"pkg/a.go": {Path: "pkg/a.go", Data: []byte(content)}}}
		before := maps.Clone(ws.files)
		c, err := planPatch(ws, patch)
		if ws.writes != 0 {
			t.Fatal("planning a patch wrote to the workspace")
		}
		res := Run(ws, patchCall(t, patch))
		if (err != nil) != res.Failed {
			t.Fatalf("plan error %v, but Run %+v", err, res)
		}
		if res.Failed {
			if ws.writes != 0 || !sameFiles(ws.files, before) {
				t.Fatalf("a patch that failed (%s) changed the workspace", res.Output)
			}
			return
		}
		if want := len(c.remove); len(c.write) > 0 && ws.writes != want+1 || len(c.write) == 0 && ws.writes != want {
			t.Fatalf("%d writes for %d files written and %d removed", ws.writes, len(c.write), len(c.remove))
		}
	})
}

func sameFiles(a, b map[string]provider.File) bool {
	return maps.EqualFunc(a, b, func(x, y provider.File) bool { return bytes.Equal(x.Data, y.Data) && x.Mode == y.Mode })
}
