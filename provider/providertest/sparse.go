package providertest

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth/snapshot"
)

// sparseProgram makes two sparse files: big.img, 15 TiB holding "head",
// "middle" at 7 TiB and "tail" at its end; and many.img, 10,000 runs of
// 4 KiB each 64 MiB apart (625 GiB), run i filled with byte i%251+1.
const sparseProgram = `
import os
f = os.open("big.img", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(f, 15 << 40)
os.pwrite(f, b"head", 0)
os.pwrite(f, b"middle", 7 << 40)
os.pwrite(f, b"tail", (15 << 40) - 4)
os.close(f)
f = os.open("many.img", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for i in range(10000):
    os.pwrite(f, bytes([i % 251 + 1]) * 4096, i << 26)
os.ftruncate(f, 10000 << 26)
os.close(f)
`

// sparseCheck prints, for the files sparseProgram made: each one's size,
// whether its data is where it was written, and how many runs of data
// SEEK_DATA finds in it; then the bytes the file system uses.
const sparseCheck = sparseRuns + `
f = os.open("big.img", os.O_RDONLY)
size = os.fstat(f).st_size
ok = os.pread(f, 4, 0) == b"head" and os.pread(f, 6, 7 << 40) == b"middle" and os.pread(f, 4, size - 4) == b"tail"
print("big", size, ok, runs(f, size))
f = os.open("many.img", os.O_RDONLY)
size = os.fstat(f).st_size
ok = all(os.pread(f, 4096, i << 26) == bytes([i % 251 + 1]) * 4096 and os.pread(f, 1, (i << 26) + 4096) == b"\0" for i in range(10000))
print("many", size, ok, runs(f, size))
v = os.statvfs(".")
print("used", (v.f_blocks - v.f_bfree) * v.f_frsize)
`

// sparseRuns defines runs(fd, size): how many runs of data SEEK_DATA
// finds in a file, "-" where the file system cannot tell.
const sparseRuns = `
import os
def runs(fd, size):
    n, off = 0, 0
    try:
        while off < size:
            d = os.lseek(fd, off, os.SEEK_DATA)
            off = os.lseek(fd, d, os.SEEK_HOLE)
            n += 1
    except OSError as e:
        if e.errno == 6:  # ENXIO: no data past off
            return str(n)
        return "-"
    return str(n)
`

// sparseBudget is the CPU time this process may spend to snapshot and
// restore sparseProgram's files: their 40 MiB of data take well under a
// second; their 15.6 TiB of holes, read as zeros, took half an hour.
const sparseBudget = 30 * time.Second

// testSparseSnapshot: a 15 TiB sparse file and one of 10,000 small runs
// of data go through a snapshot and a restore into a new sandbox for
// what their data costs, not their size, and come back the same size,
// with the same data, and sparse.
func testSparseSnapshot(t *testing.T, s *suite) {
	p, sb := s.sandbox(t)
	mustPython(t, sb, sparseProgram)
	// gVisor's file system calls every byte data: there, a file can be
	// read for its holes only up to a bound, and these are left out of
	// the snapshot, with a note, rather than read for hours.
	showsHoles := strings.TrimSpace(mustPython(t, sb, sparseRuns+`print(runs(os.open("big.img", os.O_RDONLY), 15 << 40))`)) == "3"
	dst := s.mustCreate(t, p, s.newSpec(t))
	const usedLine = "used "
	usedBefore := mustPython(t, dst, `import os; v = os.statvfs("."); print("used", (v.f_blocks - v.f_bfree) * v.f_frsize)`)

	bucket, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	store := snapshot.New(bucket)
	ctx, cancel := context.WithTimeout(t.Context(), heavyTimeout)
	defer cancel()
	ctx, used := cpuBudget(ctx, t, sparseBudget)

	info, err := store.Save(ctx, snapshot.SandboxSource(sb), snapshot.SaveOptions{})
	if err != nil {
		t.Fatalf("Save: %v (%s of CPU)", err, used())
	}
	switch {
	case showsHoles && info.Skipped != 0:
		t.Errorf("Save left out %d paths: %q", info.Skipped, info.SkippedPaths)
	case !showsHoles && (info.Skipped != 2 || !strings.HasPrefix(info.SkippedPaths[0], `"big.img": `) || !strings.HasPrefix(info.SkippedPaths[1], `"many.img": `)):
		t.Errorf("on a file system that does not show holes, Save left out %d paths: %q; want big.img and many.img, with why", info.Skipped, info.SkippedPaths)
	}
	rc, err := store.Open(ctx, info.ID, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	err = dst.Import(ctx, rc)
	rc.Close()
	if err != nil {
		t.Fatalf("Import of the snapshot: %v (%s of CPU)", err, used())
	}
	t.Logf("snapshot and restore of 15.6 TiB of sparse files holding 40 MiB: %s of this process's CPU", used())

	if !showsHoles {
		checkAbsentInSandbox(t, dst, "big.img", "many.img")
		return
	}
	out := mustPython(t, dst, sparseCheck)
	var big, many struct {
		size int64
		ok   bool
		runs string
	}
	var before, after int64
	fmt.Sscanf(strings.TrimPrefix(usedBefore, usedLine), "%d", &before)
	_, err = fmt.Sscanf(out, "big %d %t %s\nmany %d %t %s\nused %d", &big.size, &big.ok, &big.runs, &many.size, &many.ok, &many.runs, &after)
	if err != nil {
		t.Fatalf("the check printed %q: %v", out, err)
	}
	if big.size != 15<<40 || !big.ok {
		t.Errorf("big.img after the restore: %d bytes, data in place %v; want %d bytes, head, middle and tail", big.size, big.ok, int64(15<<40))
	}
	if many.size != 10000<<26 || !many.ok {
		t.Errorf("many.img after the restore: %d bytes, data in place %v; want %d bytes, 10,000 runs of data", many.size, many.ok, int64(10000<<26))
	}
	// Where the file system says where data is, the holes are where
	// they were; everywhere, the files take about their data on disk.
	if big.runs != "-" && big.runs != "3" {
		t.Errorf("big.img after the restore has %s runs of data, want 3", big.runs)
	}
	if many.runs != "-" && many.runs != "10000" {
		t.Errorf("many.img after the restore has %s runs of data, want 10000", many.runs)
	}
	if grew := after - before; grew > 128<<20 {
		t.Errorf("the restore takes %d bytes of disk for 40 MiB of data", grew)
	}
}

// cpuBudget returns a context that is cancelled once this process has
// used more than budget of CPU time from now, and a function that says
// how much it has used. The test's cost is measured, not its duration.
func cpuBudget(ctx context.Context, t *testing.T, budget time.Duration) (context.Context, func() time.Duration) {
	start := processCPU()
	used := func() time.Duration { return processCPU() - start }
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if u := used(); u > budget {
					cancel(fmt.Errorf("this process used %s of CPU, more than the %s allowed", u.Round(time.Millisecond), budget))
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(done)
		cancel(nil)
	})
	return ctx, used
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
