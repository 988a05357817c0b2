package providertest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// testDisk fills a small workspace, first with bytes, then with empty
// files: each time the sandbox's own writes fail, with "no space" (or "over
// quota"), before the bound; another sandbox writes as before; and once
// the sandbox removes what it wrote, it works as before.
func testDisk(t *testing.T, s *suite) {
	const disk = 64 << 20
	p := s.open(t)
	if !p.Capabilities().Disk {
		t.Skipf("skipped: provider %q does not bound workspaces (Capabilities.Disk is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Disk = disk
	sb := s.mustCreate(t, p, spec)
	if info, err := sb.Info(timeout(t, opTimeout)); err != nil {
		t.Fatalf("Info: %v", err)
	} else if info.Resources.Disk != disk {
		t.Errorf("Info().Resources.Disk = %d, want %d", info.Resources.Disk, int64(disk))
	}

	// Bytes: write half as much again as the bound, 1 MiB at a time,
	// each pushed to the file system, so that no cache hides the error.
	out := mustPython(t, sb, fillBytes, strconv.Itoa(disk+disk/2))
	written, errName := parseFill(t, out)
	t.Logf("writing %d MiB into a %d MiB workspace: %d MiB written, then %s", (disk+disk/2)>>20, disk>>20, written>>20, errName)
	checkFull(t, errName, "writing past Resources.Disk")
	if written > disk {
		t.Errorf("wrote %d bytes into a workspace of %d bytes", written, int64(disk))
	}
	if written < disk/2 {
		t.Errorf("only %d bytes fit in a workspace of %d bytes", written, int64(disk))
	}
	if err := sb.WriteFile(timeout(t, opTimeout), "more.bin", bytes.NewReader(make([]byte, 4<<20)), 0o644); err == nil {
		t.Errorf("WriteFile of 4 MiB into a full workspace succeeded")
	}
	// Another sandbox does not notice.
	_, other := s.sandbox(t)
	mustSh(t, other, "head -c 8388608 /dev/zero > f && rm f")
	remove(t, sb, "fill")
	mustSh(t, sb, "head -c 16777216 /dev/zero > again && rm again")

	// Files: empty ones take no blocks, so only a bound on files stops
	// them; a provider may allow up to one per KiB of Disk.
	const maxFiles = disk / 1024
	out = mustPython(t, sb, fillFiles, strconv.Itoa(maxFiles+1))
	created, errName := parseFill(t, out)
	t.Logf("creating empty files in a %d MiB workspace: %d created, then %s", disk>>20, created, errName)
	checkFull(t, errName, fmt.Sprintf("creating %d empty files", maxFiles+1))
	mustSh(t, sb, "rm -rf many && mkdir many && touch many/a many/b && rm -r many")
	checkServing(t, sb)
	if err := sb.Destroy(timeout(t, opTimeout)); err != nil {
		t.Errorf("Destroy of a sandbox that filled its workspace: %v", err)
	}
}

// fillBytes writes up to argv[1] bytes into "fill", and prints how many
// it wrote and the error that stopped it.
const fillBytes = `
import errno, os, sys
limit, n, err = int(sys.argv[1]), 0, "none"
buf = b"x" * (1 << 20)
fd = os.open("fill", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
try:
    while n < limit:
        n += os.write(fd, buf[:limit - n])
        os.fsync(fd)
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
finally:
    try:
        os.close(fd)
    except OSError:
        pass
print(n, err)
`

// fillFiles creates up to argv[1] empty files in "many", and prints how
// many it created and the error that stopped it.
const fillFiles = `
import errno, os, sys
limit, n, err = int(sys.argv[1]), 0, "none"
os.mkdir("many")
try:
    while n < limit:
        os.close(os.open("many/%d" % n, os.O_WRONLY | os.O_CREAT, 0o644))
        n += 1
except OSError as e:
    err = errno.errorcode.get(e.errno, str(e.errno))
print(n, err)
`

func parseFill(t *testing.T, out string) (n int64, errName string) {
	t.Helper()
	count, errName, ok := strings.Cut(strings.TrimSpace(out), " ")
	n, err := strconv.ParseInt(count, 10, 64)
	if !ok || err != nil {
		t.Fatalf("unexpected output from the fill program: %q", out)
	}
	return n, errName
}

// checkFull checks that what stopped a fill is a full workspace.
func checkFull(t *testing.T, errName, what string) {
	t.Helper()
	switch errName {
	case "ENOSPC", "EDQUOT":
	case "none":
		t.Errorf("%s succeeded; want ENOSPC", what)
	default:
		t.Errorf("%s failed with %s; want ENOSPC", what, errName)
	}
}
