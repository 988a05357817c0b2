package snapshot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// deepPath returns a relative path of about n bytes, in components of
// 100 bytes, ending in file.
func deepPath(n int, file string) string {
	var parts []string
	for l := 0; l+101+len(file) <= n; l += 101 {
		parts = append(parts, strings.Repeat(string(rune('a'+len(parts)%26)), 100))
	}
	return strings.Join(append(parts, file), "/")
}

// mkdirDeep makes dir/rel's parents and writes it, one component at a
// time: the whole path may be longer than the kernel takes at once.
func writeDeep(t *testing.T, dir, rel, data string) {
	t.Helper()
	parts := strings.Split(rel, "/")
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, p := range parts[:len(parts)-1] {
		if err := root.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		next, err := root.OpenRoot(p)
		if err != nil {
			t.Fatal(err)
		}
		root.Close()
		root = next
	}
	if err := root.WriteFile(parts[len(parts)-1], []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDaemonOddNames: names are bytes. A workspace whose names are not
// UTF-8, hold newlines, or make a 4000-byte path snapshots and restores
// whole; a path too long to carry is left out with a warning, and the
// snapshot is still taken.
func TestDaemonOddNames(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	to, wsTo := serveDaemon(t)
	mt := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	writeFile(t, filepath.Join(wsFrom, "bad\xffname.txt"), []byte("latin-1"), 0o644, mt)
	writeFile(t, filepath.Join(wsFrom, "dir\xfe/inner\x80"), []byte("inner"), 0o644, mt)
	writeFile(t, filepath.Join(wsFrom, "new\nline"), []byte("nl"), 0o644, mt)
	if err := os.Symlink("bad\xffname.txt", filepath.Join(wsFrom, "link\xff")); err != nil {
		t.Fatal(err)
	}
	deep := deepPath(4000, "deep.txt")
	writeDeep(t, wsFrom, deep, "deep")
	tooDeep := deepPath(5000, "too-deep.txt")
	writeDeep(t, wsFrom, tooDeep, "too deep")

	s, _ := newStore(t)
	info, err := s.Save(t.Context(), &daemonSource{c: from}, SaveOptions{})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if info.Skipped == 0 || len(info.SkippedPaths) != 1 || !strings.Contains(info.SkippedPaths[0], "more than 4096") {
		t.Errorf("Save skipped %d paths, %q; want the path of more than 4096 bytes", info.Skipped, info.SkippedPaths)
	}
	rc, err := s.Open(t.Context(), info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := to.Import(t.Context(), rc); err != nil {
		t.Fatalf("Import: %v", err)
	}
	for name, want := range map[string]string{"bad\xffname.txt": "latin-1", "dir\xfe/inner\x80": "inner", "new\nline": "nl", "link\xff": "latin-1"} {
		if b, err := os.ReadFile(filepath.Join(wsTo, name)); err != nil || string(b) != want {
			t.Errorf("restored %q: %q, %v", name, b, err)
		}
	}
	root, err := os.OpenRoot(wsTo)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if b, err := root.ReadFile(deep); err != nil || string(b) != "deep" {
		t.Errorf("restored the 4000-byte path: %q, %v", b, err)
	}
}

// TestDaemonOddNamesRead: a file whose name is not UTF-8 is sent whole
// even when unchanged, since the source could not be asked for it by
// name, and a save that needs it has it.
func TestDaemonOddNamesRead(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	s, _ := newStore(t)
	parent := mustSave(t, s, &daemonSource{c: from}, SaveOptions{Source: "daemon/from"})
	writeFile(t, filepath.Join(wsFrom, "odd\xff.txt"), []byte("odd"), 0o644, time.Now())
	// The file predates RestoredAt and the parent does not hold it: were
	// it sent as unchanged, Save would have to ask for it by name.
	info, err := s.Save(t.Context(), &daemonSource{c: from}, SaveOptions{Source: "daemon/from", Parent: parent.ID, RestoredAt: time.Now()})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if info.Skipped != 0 || info.Files != 1 {
		t.Errorf("Save: %d files, %d skipped %q; want the odd name read", info.Files, info.Skipped, info.SkippedPaths)
	}
}
