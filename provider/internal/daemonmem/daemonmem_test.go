package daemonmem

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReserve(t *testing.T) {
	tests := []struct {
		limit, want int64
	}{
		{0, 0},
		{4 << 20, 1 << 20},   // a quarter of a small limit
		{64 << 20, 16 << 20}, // where the two meet
		{1 << 30, 16 << 20},  // 16 MiB of a large one
	}
	for _, tt := range tests {
		t.Run(strconv.FormatInt(tt.limit, 10), func(t *testing.T) {
			if got := Reserve(tt.limit); got != tt.want {
				t.Errorf("Reserve(%d) = %d, want %d", tt.limit, got, tt.want)
			}
		})
	}
}

// rssAnon is the kernel's count of this process's anonymous resident
// memory, what Self approximates, in bytes.
func rssAnon(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no RssAnon in /proc/self/status")
	return 0
}

func TestSelfCountsTheDaemonsOwnMemory(t *testing.T) {
	const grow = 64 << 20
	before := Self()
	if before <= 0 {
		t.Fatalf("Self = %d", before)
	}
	// A mapping of its own, not the Go heap: a heap that an earlier run
	// (-count) grew and freed may already hold the pages resident.
	buf, err := unix.Mmap(-1, 0, grow, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	for i := 0; i < len(buf); i += os.Getpagesize() {
		buf[i] = 1 // make each page resident
	}
	after := Self()
	anon := rssAnon(t)

	if after-before < grow*3/4 {
		t.Errorf("Self grew by %d after touching %d bytes", after-before, int64(grow))
	}
	// Self leaves out the pages shared with files: it is near the
	// anonymous resident memory, not the whole resident set.
	if diff := after - anon; diff > 2<<20 || diff < -2<<20 {
		t.Errorf("Self = %d, anonymous resident memory %d: more than 2 MiB apart", after, anon)
	}
}

// TestSelfLeavesOutFilePages: pages of a file mapped in, as the daemon's
// binary is, are shared with every sandbox and are not the daemon's.
func TestSelfLeavesOutFilePages(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	before := Self()
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	var sum byte
	for i := 0; i < len(m); i += os.Getpagesize() {
		sum += m[i] // make each page resident
	}
	after := Self()
	runtime.KeepAlive(sum)
	if grew := after - before; grew > int64(len(m))/4 {
		t.Errorf("Self grew by %d after mapping in a file of %d bytes", grew, len(m))
	}
}
