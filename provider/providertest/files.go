package providertest

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

func fileTests() []test {
	return []test{
		{name: "RoundTrip", fn: testFileRoundTrip},
		{name: "Overwrite", fn: testFileOverwrite},
		{name: "Modes", fn: testFileModes},
		{name: "Parents", fn: testFileParents},
		{name: "WriteFiles", fn: testWriteFiles},
		{name: "ListDir", fn: testListDir},
		{name: "Remove", fn: testRemove},
		{name: "Paths", fn: testFilePaths},
		{name: "SharedWithCommands", fn: testFilesSharedWithCommands},
		{name: "Missing", fn: testFileMissing},
		{name: "InsideSymlinks", fn: testInsideSymlinks},
	}
}

func testFileRoundTrip(t *testing.T, s *suite) {
	every := make([]byte, 0, 256*4)
	for range 4 {
		for i := range 256 {
			every = append(every, byte(i))
		}
	}
	random := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{2}).Read(random)
	tests := []struct {
		name, path string
		data       []byte
	}{
		{"Text", "text.txt", []byte("hello, sandbox\nsecond line\n")},
		{"EveryByteValue", "every.bin", every},
		{"Empty", "empty", nil},
		{"Random3MiB", "random.bin", random},
		{"SpacesAndUnicode", "a dir/ünïcødé ✓.txt", []byte("unicode name")},
		{"Hidden", ".hidden", []byte("dot file")},
	}
	_, sb := s.sandbox(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, sb, tt.path, tt.data, 0o644)
			if got := readFile(t, sb, tt.path); !bytes.Equal(got, tt.data) {
				t.Errorf("ReadFile(%q) = %s, want what was written, %s", tt.path, describe(got), describe(tt.data))
			}
			dir, name := splitPath(tt.path)
			fi, ok := entry(listDir(t, sb, dir), name)
			if !ok {
				t.Fatalf("ListDir(%q) does not show %q", dir, name)
			}
			if fi.Size != int64(len(tt.data)) || !fi.Mode.IsRegular() {
				t.Errorf("ListDir shows %q with size %d, mode %v; want a regular file of %d bytes", name, fi.Size, fi.Mode, len(tt.data))
			}
		})
	}
}

func testFileOverwrite(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	writeFile(t, sb, "f", []byte("a long first version of the file"), 0o644)
	writeFile(t, sb, "f", []byte("short"), 0o644)
	if got := readFile(t, sb, "f"); string(got) != "short" {
		t.Errorf("after overwriting with a shorter file, ReadFile = %q, want %q", got, "short")
	}
}

func testFileModes(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	for _, mode := range []fs.FileMode{0o755, 0o644, 0o600, 0o700, 0o640} {
		name := "mode-" + mode.String()
		writeFile(t, sb, name, []byte("#!/bin/sh\necho ran\n"), mode)
		fi, ok := entry(listDir(t, sb, "."), name)
		if !ok {
			t.Errorf("ListDir does not show %q", name)
			continue
		}
		if fi.Mode.Perm() != mode {
			t.Errorf("a file written with mode %v is listed with %v", mode, fi.Mode.Perm())
		}
	}
	writeFile(t, sb, "bin/tool.sh", []byte("#!/bin/sh\necho tool \"$@\"\n"), 0o755)
	for _, argv := range [][]string{{"./bin/tool.sh", "x"}, {"/workspace/bin/tool.sh", "x"}} {
		r, err := execute(t, sb, provider.ExecRequest{Argv: argv})
		if err != nil || r.ExitCode != 0 || r.stdout != "tool x\n" {
			t.Errorf("running a script written with mode 0755 as %q: err %v, exit code %d, stdout %q, stderr %q",
				argv, err, r.ExitCode, r.stdout, r.stderr)
		}
	}
	// The sandbox user must be able to read a file only its owner may.
	if out := mustSh(t, sb, "cat mode--rw-------"); out != "#!/bin/sh\necho ran\n" {
		t.Errorf("a command read %q from a 0600 file the API wrote", out)
	}
}

func testFileParents(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	writeFile(t, sb, "deep/er/still/x.txt", []byte("deep"), 0o644)
	if got := readFile(t, sb, "deep/er/still/x.txt"); string(got) != "deep" {
		t.Errorf("ReadFile = %q, want %q", got, "deep")
	}
	fi, ok := entry(listDir(t, sb, "deep"), "er")
	if !ok || !fi.IsDir() {
		t.Errorf("WriteFile did not create the missing parent deep/er as a directory: %+v", fi)
	}
	// Parents the API made belong to the sandbox user like the file does.
	mustSh(t, sb, "touch deep/er/new && mkdir deep/er/still/sub")
}

func testWriteFiles(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	files := []provider.File{
		{Path: "one.txt", Data: []byte("one")},
		{Path: "nested/two.txt", Data: []byte("two"), Mode: 0o600},
		{Path: "/workspace/nested/three.sh", Data: []byte("#!/bin/sh\necho three\n"), Mode: 0o755},
		{Path: "empty", Data: nil},
	}
	ctx := timeout(t, opTimeout)
	if err := sb.WriteFiles(ctx, files); err != nil {
		t.Fatalf("WriteFiles: %v", err)
	}
	for _, f := range files {
		if got := readFile(t, sb, f.Path); !bytes.Equal(got, f.Data) {
			t.Errorf("ReadFile(%q) = %q, want %q", f.Path, got, f.Data)
		}
		want := f.Mode
		if want == 0 {
			want = 0o644 // File.Mode's documented default
		}
		dir, name := splitPath(f.Path)
		if fi, ok := entry(listDir(t, sb, dir), name); !ok || fi.Mode.Perm() != want {
			t.Errorf("%q is listed with mode %v (present: %v), want %v", f.Path, fi.Mode.Perm(), ok, want)
		}
	}
	if out := mustSh(t, sb, "nested/three.sh"); out != "three\n" {
		t.Errorf("a script from WriteFiles printed %q", out)
	}
}

func testListDir(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	writeFile(t, sb, "ls/b.txt", []byte("bbb"), 0o640)
	writeFile(t, sb, "ls/a.txt", []byte("a"), 0o644)
	writeFile(t, sb, "ls/c/inner", []byte("x"), 0o644)
	mustSh(t, sb, "cd ls && ln -s a.txt link && ln -s missing-target dangling && mkdir -p 'Z upper' && : > .dot")

	want := []struct {
		name   string
		size   int64
		isDir  bool
		link   bool
		perm   fs.FileMode
		target string
	}{
		{name: ".dot", size: 0},
		{name: "Z upper", isDir: true},
		{name: "a.txt", size: 1, perm: 0o644},
		{name: "b.txt", size: 3, perm: 0o640},
		{name: "c", isDir: true},
		{name: "dangling", link: true, target: "missing-target"},
		{name: "link", link: true, target: "a.txt"},
	}
	for _, path := range []string{"ls", "/workspace/ls", "ls/", "./ls"} {
		t.Run(strings.ReplaceAll(path, "/", "_"), func(t *testing.T) {
			got := listDir(t, sb, path)
			names := make([]string, 0, len(got))
			for _, fi := range got {
				names = append(names, fi.Name)
			}
			var wantNames []string
			for _, w := range want {
				wantNames = append(wantNames, w.name)
			}
			if !slices.Equal(names, wantNames) {
				t.Fatalf("ListDir(%q) names = %q, want %q (sorted by name)", path, names, wantNames)
			}
			for i, w := range want {
				fi := got[i]
				switch {
				case w.link:
					if fi.Mode&fs.ModeSymlink == 0 || fi.Target != w.target {
						t.Errorf("%s: mode %v, target %q; want a symbolic link to %q", w.name, fi.Mode, fi.Target, w.target)
					}
				case w.isDir:
					if !fi.IsDir() {
						t.Errorf("%s: mode %v, want a directory", w.name, fi.Mode)
					}
				default:
					if !fi.Mode.IsRegular() || fi.Size != w.size {
						t.Errorf("%s: mode %v, size %d; want a regular file of %d bytes", w.name, fi.Mode, fi.Size, w.size)
					}
					if w.perm != 0 && fi.Mode.Perm() != w.perm {
						t.Errorf("%s: permissions %v, want %v", w.name, fi.Mode.Perm(), w.perm)
					}
					if fi.ModTime.IsZero() {
						t.Errorf("%s: ModTime is zero", w.name)
					}
				}
			}
		})
	}
	t.Run("Root", func(t *testing.T) {
		for _, root := range []string{".", "/workspace", "/workspace/"} {
			if _, ok := entry(listDir(t, sb, root), "ls"); !ok {
				t.Errorf("ListDir(%q) does not show the directory ls", root)
			}
		}
	})
	t.Run("Empty", func(t *testing.T) {
		if got := listDir(t, sb, "ls/Z upper"); len(got) != 0 {
			t.Errorf("ListDir of an empty directory = %+v, want nothing", got)
		}
	})
}

func testRemove(t *testing.T, s *suite) {
	tests := []struct {
		name, setup, path string
		gone, kept        []string // checked by a command after Remove
	}{
		{name: "File", setup: "echo x > f", path: "f", gone: []string{"f"}},
		{name: "Tree", setup: "mkdir -p t/a/b && echo x > t/a/b/f && echo y > t/g", path: "t", gone: []string{"t"}},
		{name: "AbsolutePath", setup: "mkdir -p abs && echo x > abs/f", path: "/workspace/abs/f", gone: []string{"abs/f"}, kept: []string{"abs"}},
		{name: "Missing", path: "no/such/file"},
		{name: "EmptyDir", setup: "mkdir e", path: "e", gone: []string{"e"}},
		// What go mod download leaves: a tree the user may not write to.
		{name: "ReadOnlyTree", setup: "mkdir -p ro/sub && echo x > ro/sub/f && chmod -R a-w ro", path: "ro", gone: []string{"ro"}},
		// Removal acts as the sandbox user, who owns the tree and may
		// give it back the rights it took away.
		{name: "UnreadableTree", setup: "mkdir -p nr/sub && echo x > nr/sub/f && chmod 000 nr/sub nr", path: "nr", gone: []string{"nr"}},
		{name: "InReadOnlyDir", setup: "mkdir -p rd && echo x > rd/f && echo y > rd/g && chmod a-w rd", path: "rd/f", gone: []string{"rd/f"}, kept: []string{"rd/g"}},
		{name: "LinkNotTarget", setup: "mkdir -p real && echo x > real/f && ln -s real link", path: "link", gone: []string{"link"}, kept: []string{"real/f"}},
	}
	_, sb := s.sandbox(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != "" {
				mustSh(t, sb, tt.setup)
			}
			ctx := timeout(t, opTimeout)
			if err := sb.Remove(ctx, tt.path); err != nil {
				t.Fatalf("Remove(%q): %v", tt.path, err)
			}
			if out := mustSh(t, sb, existsScript, tt.gone...); out != "" {
				t.Errorf("after Remove(%q) these still exist: %s", tt.path, out)
			}
			for _, k := range tt.kept {
				if out := mustSh(t, sb, existsScript, k); out == "" {
					t.Errorf("Remove(%q) also removed %s", tt.path, k)
				}
			}
		})
	}
}

// testFilePaths checks that the spellings of one workspace path name the
// same file.
func testFilePaths(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	writeFile(t, sb, "/workspace/a/b.txt", []byte("via absolute"), 0o644)
	for _, p := range []string{"a/b.txt", "./a/b.txt", "a//b.txt", "a/./b.txt", "a/x/../b.txt", "/workspace/a/b.txt", "/workspace//a/b.txt"} {
		if got, err := readFileErr(t, sb, p); err != nil || string(got) != "via absolute" {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", p, got, err, "via absolute")
		}
	}
	writeFile(t, sb, "a/b.txt", []byte("via relative"), 0o644)
	if got := readFile(t, sb, "/workspace/a/b.txt"); string(got) != "via relative" {
		t.Errorf("ReadFile(%q) = %q, want %q", "/workspace/a/b.txt", got, "via relative")
	}
	if out := mustSh(t, sb, "cat /workspace/a/b.txt"); out != "via relative" {
		t.Errorf("a command reads %q from the file the API wrote, want %q", out, "via relative")
	}
}

// testFilesSharedWithCommands checks that the API and commands act on the
// same files with the same rights.
func testFilesSharedWithCommands(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	t.Run("APIToCommand", func(t *testing.T) {
		writeFile(t, sb, "api.txt", []byte("from api\n"), 0o644)
		mustSh(t, sb, "cat api.txt > /dev/null && echo from command >> api.txt")
		if got := readFile(t, sb, "api.txt"); string(got) != "from api\nfrom command\n" {
			t.Errorf("a command could not append to a file the API wrote: %q", got)
		}
		writeFile(t, sb, "secret", []byte("s"), 0o600)
		mustSh(t, sb, "echo more >> secret && mv secret secret2 && rm secret2")
	})
	t.Run("CommandToAPI", func(t *testing.T) {
		mustSh(t, sb, "mkdir -p made/dir && printf hi > made/dir/f.txt && chmod 600 made/dir/f.txt")
		if got := readFile(t, sb, "made/dir/f.txt"); string(got) != "hi" {
			t.Errorf("ReadFile of a file a command made = %q, want %q", got, "hi")
		}
		writeFile(t, sb, "made/dir/f.txt", []byte("replaced"), 0o644)
		writeFile(t, sb, "made/dir/g.txt", []byte("new"), 0o644)
		if out := mustSh(t, sb, "cat made/dir/f.txt made/dir/g.txt"); out != "replacednew" {
			t.Errorf("a command reads %q after the API replaced and added files, want %q", out, "replacednew")
		}
		remove(t, sb, "made")
		if out := mustSh(t, sb, existsScript, "made"); out != "" {
			t.Errorf("Remove of a tree a command made left it in place")
		}
	})
}

func testFileMissing(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	writeFile(t, sb, "dir/file", []byte("x"), 0o644)
	ctx := timeout(t, opTimeout)
	// A missing file is fs.ErrNotExist, never ErrNotFound: that would say
	// the sandbox itself is gone.
	rc, readErr := sb.ReadFile(ctx, "no/such/file")
	if readErr == nil {
		rc.Close()
	}
	_, listErr := sb.ListDir(ctx, "no/such/dir")
	for op, err := range map[string]error{"ReadFile": readErr, "ListDir": listErr} {
		checkErrIs(t, err, fs.ErrNotExist, op+" of a missing path")
		if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrSandboxLost) {
			t.Errorf("%s of a missing path wraps %v, which says the sandbox is gone", op, err)
		}
	}
	// Reading a directory or listing a file is an error of some kind.
	if rc, err := sb.ReadFile(ctx, "dir"); err == nil {
		rc.Close()
		t.Errorf("ReadFile of a directory succeeded")
	}
	if _, err := sb.ListDir(ctx, "dir/file"); err == nil {
		t.Errorf("ListDir of a regular file succeeded")
	}
}

// testInsideSymlinks checks that symbolic links which stay in the
// workspace work: only links that leave it are bad input.
func testInsideSymlinks(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, "mkdir -p real/sub && echo data > real/f && ln -s real inner && ln -s real/f flink && ln -s ../f real/sub/up")
	for _, p := range []string{"inner/f", "flink", "real/sub/up"} {
		if got, err := readFileErr(t, sb, p); err != nil || string(got) != "data\n" {
			t.Errorf("ReadFile(%q) through a link inside the workspace = %q, %v; want %q", p, got, err, "data\n")
		}
	}
	if _, ok := entry(listDir(t, sb, "inner"), "f"); !ok {
		t.Errorf("ListDir through a link inside the workspace does not show its target's files")
	}
	writeFile(t, sb, "inner/g", []byte("through link"), 0o644)
	if out := mustSh(t, sb, "cat real/g"); out != "through link" {
		t.Errorf("WriteFile through a link inside the workspace: the target directory holds %q", out)
	}
}

// splitPath splits a workspace path into its directory and name.
func splitPath(p string) (dir, name string) {
	p = strings.TrimPrefix(p, provider.Workspace+"/")
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	return p[:i], p[i+1:]
}
