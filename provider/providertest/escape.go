package providertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// The escape tests aim every file operation at paths that leave the
// workspace. Writes and removals only ever target names made up for the
// test, in /tmp (which the sandbox user may write, so that an escape by
// a provider acting as that user shows) and in a scratch directory on the
// host (so that an escape by a host-side provider shows): a provider that
// fails here does no harm.

func escapeTests() []test {
	return []test{
		{name: "Lexical", fn: testEscapeLexical},
		{name: "Symlinks", fn: testEscapeSymlinks},
		{name: "SymlinkRace", fn: testEscapeRace},
		{name: "WorkspaceRoot", fn: testWorkspaceRoot},
		{name: "LinkSwapRace", serial: true, fn: testLinkSwapRace},
	}
}

// pathOp is one file operation, aimed at a path.
type pathOp struct {
	name string
	do   func(ctx context.Context, sb provider.Sandbox, path string) error
}

func readOp() pathOp {
	return pathOp{"ReadFile", func(ctx context.Context, sb provider.Sandbox, path string) error {
		rc, err := sb.ReadFile(ctx, path)
		if err == nil {
			rc.Close()
		}
		return err
	}}
}

func listOp() pathOp {
	return pathOp{"ListDir", func(ctx context.Context, sb provider.Sandbox, path string) error {
		_, err := sb.ListDir(ctx, path)
		return err
	}}
}

func writeOp() pathOp {
	return pathOp{"WriteFile", func(ctx context.Context, sb provider.Sandbox, path string) error {
		return sb.WriteFile(ctx, path, strings.NewReader("pwned"), 0o644)
	}}
}

func writeFilesOp() pathOp {
	return pathOp{"WriteFiles", func(ctx context.Context, sb provider.Sandbox, path string) error {
		return sb.WriteFiles(ctx, []provider.File{{Path: path, Data: []byte("pwned")}})
	}}
}

func removeOp() pathOp {
	return pathOp{"Remove", func(ctx context.Context, sb provider.Sandbox, path string) error {
		return sb.Remove(ctx, path)
	}}
}

// checkBadInput runs op on path and fails the test unless it is refused
// as bad input.
func checkBadInput(t *testing.T, sb provider.Sandbox, op pathOp, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	checkErrIs(t, op.do(ctx, sb, path), errdefs.ErrBadInput, fmt.Sprintf("%s(%q)", op.name, path))
}

func testEscapeLexical(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, "mkdir -p a sub")
	victim := randomName()

	// spellings of a path outside the workspace, made from a target
	// relative to /.
	spellings := func(target string) [][2]string {
		return [][2]string{
			{"DotDot", "../" + target},
			{"Absolute", "/" + target},
			{"InnerDotDot", "a/../../" + target},
			{"DeepDotDot", "sub/../../../../" + target},
			{"WorkspaceDotDot", "/workspace/../" + target},
			{"WorkspacePrefix", "/workspace-" + target},
			{"Empty", ""},
			{"NUL", "a\x00b"},
			{"InvalidUTF8", "a\xffb"},
			{"TooLong", strings.Repeat("a/", provider.MaxPathLen/2+1) + "x"},
		}
	}
	tests := []struct {
		op     pathOp
		target string
	}{
		// Reads aim at a real file, so an escape would succeed visibly;
		// writes and removals at a name nothing uses.
		{readOp(), "etc/passwd"},
		{listOp(), "etc"},
		{writeOp(), "tmp/" + victim},
		{writeFilesOp(), "tmp/" + victim},
		{removeOp(), "tmp/" + victim},
	}
	for _, tt := range tests {
		t.Run(tt.op.name, func(t *testing.T) {
			for _, sp := range spellings(tt.target) {
				t.Run(sp[0], func(t *testing.T) {
					checkBadInput(t, sb, tt.op, sp[1])
				})
			}
			// Checked after each operation, before a later one (Remove)
			// could tidy away the evidence.
			checkAbsentInSandbox(t, sb, "/tmp/"+victim, "/"+victim, "/workspace-tmp")
			checkAbsentOnHost(t, "/tmp/"+victim, "/"+victim, "/workspace-tmp/"+victim)
		})
	}
	mustSh(t, sb, "test -s /etc/passwd")
}

func testEscapeSymlinks(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	// A scratch directory on the host, for providers that act on the host:
	// a link to it from the sandbox leads there if they follow links.
	host := t.TempDir()
	hostVictim := filepath.Join(host, "victim")
	if err := os.WriteFile(hostVictim, []byte("canary"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Made afresh before each operation, in case one replaced a link by a
	// file or directory of its own (which is not an escape).
	makeLinks := func(t *testing.T) {
		t.Helper()
		mustSh(t, sb, `
rm -rf evil up chain tmplink d1 hostdir hostfile
ln -s /etc evil
ln -s ../../.. up
ln -s up/etc chain
ln -s /tmp tmplink
mkdir d1 && ln -s ../../etc d1/etc2
ln -s "$1" hostdir
ln -s "$1/victim" hostfile
`, host)
	}
	victim := randomName()
	checkNoEscape := func(t *testing.T) {
		t.Helper()
		checkAbsentInSandbox(t, sb, "/etc/"+victim, "/"+victim, "/tmp/"+victim)
		checkAbsentOnHost(t, "/etc/"+victim, "/"+victim, "/tmp/"+victim, filepath.Join(host, victim))
		if got, err := os.ReadFile(hostVictim); err != nil || string(got) != "canary" {
			t.Errorf("escape: the host file behind a link from the sandbox changed: %q, %v", got, err)
			_ = os.WriteFile(hostVictim, []byte("canary"), 0o644)
		}
	}

	tests := []struct {
		op    pathOp
		paths []string
	}{
		{readOp(), []string{"evil/passwd", "/workspace/evil/passwd", "up/etc/passwd", "chain/passwd", "d1/etc2/passwd", "hostdir/victim", "hostfile"}},
		{listOp(), []string{"evil", "up", "chain", "d1/etc2", "hostdir", "/workspace/up/etc"}},
		{writeOp(), []string{"evil/" + victim, "up/" + victim, "up/tmp/" + victim, "tmplink/" + victim, "d1/etc2/" + victim, "hostdir/" + victim}},
		{writeFilesOp(), []string{"up/tmp/" + victim, "tmplink/" + victim, "hostdir/" + victim}},
		{removeOp(), []string{"evil/" + victim, "up/tmp/" + victim, "tmplink/" + victim, "hostdir/victim"}},
	}
	for _, tt := range tests {
		t.Run(tt.op.name, func(t *testing.T) {
			for _, p := range tt.paths {
				makeLinks(t)
				checkBadInput(t, sb, tt.op, p)
			}
			checkNoEscape(t)
		})
	}

	t.Run("WriteOverLinkOut", func(t *testing.T) {
		makeLinks(t)
		// Writing to a path that is itself a link out may be refused or
		// may replace the link; it must not write through it.
		ctx := timeout(t, opTimeout)
		err := sb.WriteFile(ctx, "hostfile", strings.NewReader("pwned"), 0o644)
		if err != nil && !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("WriteFile over a link out of the workspace: %v; want nil (link replaced) or ErrBadInput", err)
		}
		if got, _ := os.ReadFile(hostVictim); string(got) != "canary" {
			t.Errorf("WriteFile wrote through a link to a file on the host: it now holds %q", got)
		}
	})

	t.Run("RemoveLinkOnly", func(t *testing.T) {
		// A link out of the workspace is the sandbox's own file: removing
		// it is allowed, and removes the link alone.
		makeLinks(t)
		for _, link := range []string{"evil", "up", "hostdir", "tmplink"} {
			remove(t, sb, link)
		}
		if out := mustSh(t, sb, existsScript, "evil", "up", "hostdir", "tmplink"); out != "" {
			t.Errorf("Remove of links left them in place: %s", out)
		}
		mustSh(t, sb, "test -s /etc/passwd && test -d /tmp")
		if _, err := os.Stat(hostVictim); err != nil {
			t.Errorf("Remove of a link to a host directory removed what it pointed to: %v", err)
		}
	})

	checkNoEscape(t)
}

// testEscapeRace swaps a directory for a link out of the workspace as fast
// as a command can while the test writes, reads and lists through it. A
// provider that checks a path and then opens it by name loses this race.
func testEscapeRace(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	name := randomName()
	const swap = `echo go
while true; do
  mkdir d; rm -rf d; ln -s / d; rm d
  mkdir d; rm -rf d; ln -s /tmp d; rm d
done 2>/dev/null`

	started := newSignalWriter()
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(timeout(t, opTimeout), provider.ExecRequest{Shell: swap, Timeout: 5 * time.Second, Stdout: started})
		done <- err
	}()
	select {
	case <-started.first:
	case err := <-done:
		t.Fatalf("the swapping command ended before it began: %v", err)
	}

	var (
		wrote, refused, other, readsOut, listsOut int
		firstOther                                error
		swapErr                                   error
	)
loop:
	for {
		select {
		case swapErr = <-done:
			break loop
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
		err := sb.WriteFile(ctx, "d/"+name, strings.NewReader("pwned"), 0o644)
		switch {
		case err == nil:
			wrote++
		case errors.Is(err, errdefs.ErrBadInput):
			refused++
		default:
			// d vanishing between two steps of the write is a fair
			// failure; what must not happen is a file outside.
			if other++; firstOther == nil {
				firstOther = err
			}
		}
		// d never holds etc/passwd, so reading it means reading /etc/passwd.
		if rc, err := sb.ReadFile(ctx, "d/etc/passwd"); err == nil {
			data, _ := io.ReadAll(io.LimitReader(rc, 100))
			rc.Close()
			if readsOut++; readsOut == 1 {
				t.Errorf("escape: ReadFile(d/etc/passwd) succeeded while d was swapped with a link to /; it read %q", data)
			}
		}
		if infos, err := sb.ListDir(ctx, "d"); err == nil {
			for _, fi := range infos {
				if fi.Name == "etc" || fi.Name == "proc" || fi.Name == "usr" {
					if listsOut++; listsOut == 1 {
						t.Errorf("escape: ListDir(d) listed a directory outside the workspace while d was swapped with a link: it shows %q", fi.Name)
					}
					break
				}
			}
		}
		cancel()
	}
	t.Logf("during the race: %d writes succeeded, %d were refused as bad input, %d failed otherwise (the first: %v); %d reads and %d listings escaped; the swapping command ended with %v",
		wrote, refused, other, firstOther, readsOut, listsOut, swapErr)
	checkAbsentInSandbox(t, sb, "/"+name, "/tmp/"+name)
	checkAbsentOnHost(t, "/"+name, "/tmp/"+name)
}

// testWorkspaceRoot checks that the workspace itself cannot be removed or
// replaced by a file.
func testWorkspaceRoot(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	writeFile(t, sb, "keep", []byte("kept"), 0o644)
	mustSh(t, sb, "mkdir -p a")
	for _, p := range []string{".", "./", "/workspace", "/workspace/", "a/..", "/workspace/a/.."} {
		checkBadInput(t, sb, removeOp(), p)
		checkBadInput(t, sb, writeOp(), p)
	}
	if got, err := readFileErr(t, sb, "keep"); err != nil || string(got) != "kept" {
		t.Errorf("the workspace lost its files: keep = %q, %v", got, err)
	}
	checkServing(t, sb)
}
