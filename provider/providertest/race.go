package providertest

import (
	"github.com/berth-dev/berth/internal/randid"

	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// raceDuration is how long testLinkSwapRace attacks each provider. The
// race is won by chance, so it must run long enough for a provider that
// can lose it to lose it every time (gVisor's daemon, reading as root
// through os.Root, lost within seconds); issue 18 requires at least 30
// s per provider.
const raceDuration = 30 * time.Second

// raceOpTimeout bounds one operation during the race: an export that
// follows a link to / could otherwise walk the whole of it.
const raceOpTimeout = time.Minute

// swapper swaps each of its arguments, name=target=decoys, between a
// directory of the sandbox's own, which holds the files decoys (a comma
// separated list of paths, made again now and then should the test
// remove them), and a link to target, by renames, as fast as it can:
// every name is a directory, a link or briefly nothing. The decoys
// carry the names of files at the target, so a walk or a read that goes
// by name while the name is a link reaches the target's file.
const swapper = `
import os, sys
pairs = [a.split("=", 2) for a in sys.argv[1:]]
def decoys():
    for name, _, files in pairs:
        for f in files.split(","):
            p = os.path.join(name, f)
            if not os.path.lexists(p):
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "w") as w:
                    w.write("decoy")
for name, target, _ in pairs:
    # A run before this one may have been killed in the middle of a swap.
    if os.path.islink(name):
        os.unlink(name)
    if os.path.isdir(name + ".dir") and not os.path.lexists(name):
        os.rename(name + ".dir", name)
    if os.path.lexists(name + ".lnk"):
        os.unlink(name + ".lnk")
    os.makedirs(name, exist_ok=True)
    os.symlink(target, name + ".lnk")
decoys()
print("go", flush=True)
i = 0
while True:
    i += 1
    for name, _, _ in pairs:
        try:
            os.rename(name, name + ".dir")
            os.rename(name + ".lnk", name)
            os.rename(name, name + ".lnk")
            os.rename(name + ".dir", name)
        except OSError:
            pass
    if i % 64 == 0:
        try:
            decoys()
        except OSError:
            pass
`

// testLinkSwapRace attacks every operation on workspace contents with a
// command that swaps directories for links to host paths (/etc, /root,
// /, a directory of the sandbox outside the workspace, a directory on
// the host) in a loop, while exports, path exports, changed-file
// exports (what snapshots read), reads, listings, removals, writes and
// imports go through them. No host file the sandbox user may not read
// (a canary of mode 0600 in /etc, /etc/shadow) may appear in anything
// the provider returns, and nothing outside the workspace may be
// written or removed.
func testLinkSwapRace(t *testing.T, s *suite) {
	// A canary only root may read, in the host's /etc, which the linux
	// and gvisor providers bind into their sandboxes read-only.
	secret := "berth-canary-" + randid.Hex(16)
	canary := "/etc/" + randomName()
	if err := os.WriteFile(canary, []byte(secret), 0o600); err != nil {
		t.Fatalf("write a canary in the host's /etc (the suite runs as root): %v", err)
	}
	t.Cleanup(func() { os.Remove(canary) })
	shadow := shadowLine(t)
	// A directory on the host, for providers that act on the host.
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "keep"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}

	_, sb := s.sandbox(t)
	// A directory of the sandbox's own outside the workspace, which the
	// sandbox user may write: what the daemon removes or writes there
	// through a link has left the workspace, whoever it acts as.
	outside := "/tmp/" + randomName()
	mustSh(t, sb, `mkdir "$1" && echo keep > "$1/keep"`, outside)
	victim := randomName()

	// The swapper runs for raceDuration; should it end sooner (killed
	// for the memory a provider's walk of / took, say), it starts again.
	deadline := time.Now().Add(raceDuration)
	started := newSignalWriter()
	done := make(chan []string, 1)
	go func() {
		var ends []string
		for time.Until(deadline) > 0 {
			var stderr bytes.Buffer
			res, err := sb.Exec(timeout(t, raceDuration+opTimeout), provider.ExecRequest{
				Argv: []string{python, "-c", swapper,
					"etc=/etc=shadow,passwd," + path.Base(canary),
					"root=/root=.profile",
					"slash=/=etc/shadow,etc/" + path.Base(canary),
					"tmp=" + outside + "=keep",
					"host=" + host + "=keep"},
				Timeout: time.Until(deadline),
				Stdout:  started,
				Stderr:  &stderr,
			})
			if errors.Is(err, errdefs.ErrTimeout) {
				break
			}
			ends = append(ends, fmt.Sprintf("exit code %d, signal %q, stderr %q, %v", res.ExitCode, res.Signal, tail(stderr.String()), err))
		}
		done <- ends
	}()
	select {
	case <-started.first:
	case ends := <-done:
		t.Fatalf("the swapping command ended before it began: %s", ends)
	}

	// leaked reports what of the host's secrets b holds.
	leaked := func(b []byte) string {
		switch {
		case bytes.Contains(b, []byte(secret)):
			return "the content of a host canary of mode 0600"
		case shadow != "" && bytes.Contains(b, []byte(shadow)):
			return "a line of the host's /etc/shadow"
		}
		return ""
	}
	var escapes []string
	escaped := func(format string, args ...any) {
		if len(escapes) < 10 {
			escapes = append(escapes, fmt.Sprintf(format, args...))
		}
	}
	checkTar := func(op string, rc io.ReadCloser) error {
		defer rc.Close()
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
			if err != nil {
				return err
			}
			if what := leaked(data); what != "" {
				escaped("%s gave %q holding %s", op, hdr.Name, what)
			}
		}
	}
	exports := []struct {
		name string
		do   func(ctx context.Context) (io.ReadCloser, error)
	}{
		{"Export", sb.Export},
	}
	if ce, ok := sb.(provider.ChangedExporter); ok {
		exports = append(exports, struct {
			name string
			do   func(ctx context.Context) (io.ReadCloser, error)
		}{"ExportChanged", func(ctx context.Context) (io.ReadCloser, error) {
			return ce.ExportChanged(ctx, time.Unix(1, 0))
		}})
	}
	if pe, ok := sb.(provider.PathExporter); ok {
		for _, p := range []string{"etc", "slash/etc", "tmp", "host"} {
			exports = append(exports, struct {
				name string
				do   func(ctx context.Context) (io.ReadCloser, error)
			}{"ExportPath(" + p + ")", func(ctx context.Context) (io.ReadCloser, error) {
				return pe.ExportPath(ctx, p)
			}})
		}
	}
	reads := []string{"etc/shadow", "etc/" + path.Base(canary), "slash/etc/shadow", "host/keep", "tmp/keep"}
	importTar := raceImport(t, "tmp/"+victim, "host/"+victim, "etc/"+victim)

	var ops, failed int
	var firstFailure error
	fail := func(op string, err error) {
		if failed++; firstFailure == nil {
			firstFailure = fmt.Errorf("%s: %w", op, err)
		}
	}
	for time.Until(deadline) > 0 {
		ctx, cancel := context.WithTimeout(t.Context(), raceOpTimeout)
		for _, e := range exports {
			rc, err := e.do(ctx)
			if err == nil {
				err = checkTar(e.name, rc)
			}
			if ops++; err != nil {
				fail(e.name, err) // a path gone meanwhile is a fair failure
			}
		}
		for _, p := range reads {
			if rc, err := sb.ReadFile(ctx, p); err == nil {
				data, _ := io.ReadAll(io.LimitReader(rc, 1<<20))
				rc.Close()
				if what := leaked(data); what != "" {
					escaped("ReadFile(%s) read %s", p, what)
				}
			}
			ops++
		}
		for _, p := range []string{"etc", "slash/etc", "host"} {
			// What a listing of the host's /etc shows the sandbox sees
			// anyway; the listing must not go wrong for it.
			_, _ = sb.ListDir(ctx, p)
			ops++
		}
		for _, p := range []string{"tmp/keep", "host/keep", "etc/" + victim, "slash/etc/" + victim} {
			if err := sb.Remove(ctx, p); err != nil {
				fail("Remove("+p+")", err)
			}
			ops++
		}
		for _, p := range []string{"tmp/" + victim, "host/" + victim} {
			if err := sb.WriteFile(ctx, p, strings.NewReader("pwned"), 0o644); err != nil {
				fail("WriteFile("+p+")", err)
			}
			ops++
		}
		if err := sb.Import(ctx, bytes.NewReader(importTar)); err != nil {
			fail("Import", err)
		}
		ops++
		cancel()
	}
	ends := <-done
	t.Logf("during the race: %d operations, %d failed (the first: %v); the swapping command ended early %d times (the first: %s)",
		ops, failed, firstFailure, len(ends), strings.Join(ends[:min(len(ends), 1)], ""))
	for _, e := range escapes {
		t.Errorf("escape: %s", e)
	}
	// The daemon's file operations must not end a command: one that
	// forked it from a thread that then ended would (parent-death signal).
	if len(ends) > 0 {
		t.Errorf("the swapping command was ended %d times before its timeout while file operations ran; the first: %s", len(ends), ends[0])
	}

	// Nothing outside the workspace was removed or written.
	if out := mustSh(t, sb, `cat "$1/keep"; ls -A "$1"`, outside); out != "keep\nkeep\n" {
		t.Errorf("escape: the sandbox's %s, outside the workspace, changed during the race: it holds %q; want keep alone", outside, out)
	}
	if got, err := os.ReadFile(filepath.Join(host, "keep")); err != nil || string(got) != secret {
		t.Errorf("escape: the host's %s/keep changed during the race: %q, %v", host, got, err)
	}
	checkAbsentOnHost(t, filepath.Join(host, victim), "/etc/"+victim, "/"+victim, "/tmp/"+victim)
	checkAbsentInSandbox(t, sb, "/etc/"+victim, "/"+victim, "/tmp/"+victim, outside+"/"+victim)
	if got, err := os.ReadFile(canary); err != nil || string(got) != secret {
		t.Errorf("escape: the host canary %s changed during the race: %q, %v", canary, got, err)
	}
	checkServing(t, sb)
}

// shadowLine is the longest line of the host's /etc/shadow, to look for
// in what a provider returns, or "" if it has none.
func shadowLine(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("/etc/shadow")
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatalf("read the host's /etc/shadow (the suite runs as root): %v", err)
	}
	var longest string
	for _, l := range strings.Split(string(data), "\n") {
		if len(l) > len(longest) {
			longest = l
		}
	}
	return longest
}

// raceImport is a tar stream of a file at each of names.
func raceImport(t *testing.T, names ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Size: 5, Mode: 0o644, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("pwned")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
