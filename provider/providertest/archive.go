package providertest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

func archiveTests() []test {
	return []test{
		{name: "RoundTrip", fn: testArchiveRoundTrip},
		{name: "Hostile", fn: testArchiveHostile},
		{name: "UserRights", fn: testArchiveUserRights},
	}
}

// maxTestTar bounds how much of an export the suite reads into memory;
// its trees are tiny.
const maxTestTar = 64 << 20

func testArchiveRoundTrip(t *testing.T, s *suite) {
	p := s.open(t)
	src := s.mustCreate(t, p, s.newSpec(t))
	writeFile(t, src, "proj/src/main.go", []byte("package main\n"), 0o644)
	writeFile(t, src, "proj/run.sh", []byte("#!/bin/sh\necho run\n"), 0o755)
	writeFile(t, src, "proj/private", []byte("p"), 0o600)
	writeFile(t, src, "proj/empty", nil, 0o644)
	mustSh(t, src, `cd proj && mkdir -p emptydir a/b/c && echo deep > a/b/c/deep.txt &&
ln -s src/main.go link && ln -s missing dangling && head -c 100000 /dev/urandom > a/random.bin`)

	ctx := timeout(t, opTimeout)
	rc, err := src.Export(ctx)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
	rc.Close()
	if err != nil {
		t.Fatalf("reading the export: %v", err)
	}

	t.Run("Format", func(t *testing.T) {
		hdrs := readTar(t, data)
		for _, want := range []struct {
			name string
			typ  byte
			mode int64
		}{
			{"proj/run.sh", tar.TypeReg, 0o755},
			{"proj/private", tar.TypeReg, 0o600},
			{"proj/empty", tar.TypeReg, 0o644},
			{"proj/emptydir", tar.TypeDir, 0},
			{"proj/link", tar.TypeSymlink, 0},
		} {
			h, ok := hdrs[want.name]
			switch {
			case !ok:
				t.Errorf("the export has no entry %q", want.name)
			case h.Typeflag != want.typ:
				t.Errorf("the export's %q has type %q, want %q", want.name, h.Typeflag, want.typ)
			case want.mode != 0 && h.Mode&0o777 != want.mode:
				t.Errorf("the export's %q has mode %o, want %o", want.name, h.Mode&0o777, want.mode)
			}
		}
		if h := hdrs["proj/link"]; h != nil && h.Linkname != "src/main.go" {
			t.Errorf("the export's proj/link points to %q, want %q", h.Linkname, "src/main.go")
		}
	})

	t.Run("ExportPath", func(t *testing.T) { testExportPath(t, src) })

	t.Run("Import", func(t *testing.T) {
		dst := s.mustCreate(t, p, s.newSpec(t))
		// Import unpacks over what is there: unrelated files stay, named
		// ones are replaced.
		writeFile(t, dst, "keep.txt", []byte("keep"), 0o644)
		writeFile(t, dst, "proj/src/main.go", []byte("old content, longer than the new"), 0o644)
		if err := dst.Import(timeout(t, opTimeout), bytes.NewReader(data)); err != nil {
			t.Fatalf("Import: %v", err)
		}
		want, got := tree(t, src, "proj"), tree(t, dst, "proj")
		for _, name := range sortedKeys(want) {
			if got[name] != want[name] {
				t.Errorf("after Import, %s is %q; in the exported sandbox it is %q", name, got[name], want[name])
			}
		}
		for _, name := range sortedKeys(got) {
			if _, ok := want[name]; !ok {
				t.Errorf("after Import, %s exists, but it was not in the exported tree", name)
			}
		}
		if got := readFile(t, dst, "keep.txt"); string(got) != "keep" {
			t.Errorf("Import lost a file that was not in the archive: keep.txt = %q", got)
		}
		if out := mustSh(t, dst, "proj/run.sh"); out != "run\n" {
			t.Errorf("an imported script printed %q", out)
		}
		// Imported files belong to the sandbox user.
		mustSh(t, dst, "echo more >> proj/private && touch proj/emptydir/new && rm proj/a/b/c/deep.txt")
	})
}

// testExportPath exports parts of testArchiveRoundTrip's tree.
func testExportPath(t *testing.T, sb provider.Sandbox) {
	pe, ok := sb.(provider.PathExporter)
	if !ok {
		t.Skipf("skipped: the sandbox does not implement provider.PathExporter")
	}
	export := func(p string) (map[string]*tar.Header, error) {
		rc, err := pe.ExportPath(timeout(t, opTimeout), p)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
		if err != nil {
			t.Fatalf("reading the export of %s: %v", p, err)
		}
		return readTar(t, data), nil
	}
	for _, tt := range []struct {
		path string
		want []string
	}{
		{"proj/a", []string{"a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/random.bin"}},
		{"/workspace/proj/a/b/", []string{"b", "b/c", "b/c/deep.txt"}},
		{"proj/run.sh", []string{"run.sh"}},
		{"proj/emptydir", []string{"emptydir"}},
	} {
		hdrs, err := export(tt.path)
		if err != nil {
			t.Errorf("ExportPath(%q): %v", tt.path, err)
			continue
		}
		if got := sortedKeys(hdrs); !slices.Equal(got, tt.want) {
			t.Errorf("ExportPath(%q) has entries %q, want %q", tt.path, got, tt.want)
		}
	}
	if h, _ := export("proj/run.sh"); h["run.sh"] == nil || h["run.sh"].Mode&0o777 != 0o755 || h["run.sh"].Size != int64(len("#!/bin/sh\necho run\n")) {
		t.Errorf("ExportPath of a file: %+v", h["run.sh"])
	}
	_, err := export("proj/missing")
	checkErrIs(t, err, fs.ErrNotExist, "ExportPath of a missing path")
	_, err = export("../etc")
	checkErrIs(t, err, errdefs.ErrBadInput, "ExportPath of a path leaving the workspace")
	// A link out of the workspace is not followed out of it.
	mustSh(t, sb, "ln -sfn / out")
	defer mustSh(t, sb, "rm out")
	if hdrs, err := export("out"); err == nil && len(hdrs) > 0 {
		t.Errorf("ExportPath through a link to / exported %d entries, e.g. %q", len(hdrs), sortedKeys(hdrs)[0])
	}
}

func testArchiveHostile(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	victim := randomName()
	host := t.TempDir()
	tests := []struct {
		name    string
		entries []tarEntry
		// inWorkspace are entries that must not have been created.
		inWorkspace []string
	}{
		{name: "DotDot", entries: []tarEntry{tarFile("../" + victim)}},
		{name: "DeepDotDot", entries: []tarEntry{tarFile("a/../../../tmp/" + victim)}},
		{name: "Absolute", entries: []tarEntry{tarFile("/tmp/" + victim)}},
		{name: "SymlinkThenFile", entries: []tarEntry{tarSymlink("l", "/tmp"), tarFile("l/" + victim)}},
		{name: "RelativeSymlinkThenFile", entries: []tarEntry{tarSymlink("r", "../../../tmp"), tarFile("r/" + victim)}},
		{name: "HostSymlinkThenFile", entries: []tarEntry{tarSymlink("lh", host), tarFile("lh/" + victim)}},
		{name: "HardlinkOut", entries: []tarEntry{tarHardlink("h1", "/etc/passwd")}, inWorkspace: []string{"h1"}},
		{name: "HardlinkDotDot", entries: []tarEntry{tarHardlink("h2", "../../../../etc/passwd")}, inWorkspace: []string{"h2"}},
		{name: "HardlinkThroughSymlink", entries: []tarEntry{tarSymlink("e", "/etc"), tarHardlink("h3", "e/passwd")}, inWorkspace: []string{"h3"}},
		{name: "CharDevice", entries: []tarEntry{tarDevice("cdev", tar.TypeChar, 1, 3)}, inWorkspace: []string{"cdev"}},
		{name: "BlockDevice", entries: []tarEntry{tarDevice("bdev", tar.TypeBlock, 7, 0)}, inWorkspace: []string{"bdev"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sb.Import(timeout(t, opTimeout), bytes.NewReader(buildTar(t, tt.entries...)))
			checkErrIs(t, err, errdefs.ErrBadInput, "Import of a hostile archive")
			checkAbsentInSandbox(t, sb, "/"+victim, "/tmp/"+victim, "/etc/"+victim)
			checkAbsentOnHost(t, "/"+victim, "/tmp/"+victim, filepath.Join(host, victim))
			for _, name := range tt.inWorkspace {
				if out := mustSh(t, sb, existsScript, name); out != "" {
					t.Errorf("Import of a hostile archive created %s in the workspace", name)
				}
			}
		})
	}
	checkServing(t, sb)
}

// tarEntry is an entry of an archive the test builds.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func tarFile(name string) tarEntry {
	const body = "pwned"
	return tarEntry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: time.Now()}, body}
}

func tarSymlink(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: time.Now()}}
}

func tarHardlink(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: time.Now()}}
}

func tarDevice(name string, typ byte, major, minor int64) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: typ, Name: name, Mode: 0o666, Devmajor: major, Devminor: minor, ModTime: time.Now()}}
}

func buildTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatalf("building a tar: header %q: %v", e.hdr.Name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatalf("building a tar: %v", err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("building a tar: %v", err)
	}
	return buf.Bytes()
}

// readTar reads an exported archive, checking that every entry names a
// path inside the workspace, and returns its headers by clean name.
func readTar(t *testing.T, data []byte) map[string]*tar.Header {
	t.Helper()
	hdrs := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the export is not a valid tar stream: %v", err)
		}
		name := path.Clean(h.Name)
		if provider.Escapes(h.Name) {
			t.Errorf("the export has an entry %q outside the workspace; entries are relative to it", h.Name)
		}
		hdrs[name] = h
	}
	return hdrs
}

// tree describes every entry under root, recursively, by path relative to
// root: type, permissions, and a regular file's size and content hash or a
// link's target.
func tree(t *testing.T, sb provider.Sandbox, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		for _, fi := range listDir(t, sb, path.Join(root, dir)) {
			rel := path.Join(dir, fi.Name)
			switch {
			case fi.Mode&fs.ModeSymlink != 0:
				out[rel] = "link to " + fi.Target
			case fi.IsDir():
				out[rel] = fmt.Sprintf("dir %v", fi.Mode.Perm())
				walk(rel)
			default:
				sum := sha256.Sum256(readFile(t, sb, path.Join(root, rel)))
				out[rel] = fmt.Sprintf("file %v, %d bytes, sha256 %s", fi.Mode, fi.Size, hex.EncodeToString(sum[:8]))
			}
		}
	}
	walk("")
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// testArchiveUserRights checks that an export reads with the sandbox
// user's rights, no more: what the user cannot read is left out (a
// directory keeps its entry, empty), and the rest comes whole.
func testArchiveUserRights(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, `mkdir -p shut/sub && echo in > shut/sub/f && echo secret > closed &&
echo open > open && chmod 000 closed shut`)
	ctx := timeout(t, opTimeout)
	rc, err := sb.Export(ctx)
	if err != nil {
		t.Fatalf("Export: %v", err)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxTestTar))
	rc.Close()
	if err != nil {
		t.Fatalf("reading the export: %v", err)
	}
	hdrs := readTar(t, data)
	if _, ok := hdrs["open"]; !ok {
		t.Errorf("the export lacks a file the user can read; it holds %v", slices.Sorted(maps.Keys(hdrs)))
	}
	for _, name := range []string{"closed", "shut/sub", "shut/sub/f"} {
		if _, ok := hdrs[name]; ok {
			t.Errorf("the export holds %s, which the sandbox user cannot read", name)
		}
	}
	if _, ok := hdrs["shut"]; !ok {
		t.Errorf("the export lacks the entry of a directory the user cannot read; it holds %v", slices.Sorted(maps.Keys(hdrs)))
	}
	checkServing(t, sb)
}
