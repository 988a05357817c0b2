package snapshot

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob/fileblob"
)

// Benchmark workspaces are generated once per test binary and shared by
// the benchmarks, in a directory TestMain removes.
var bench struct {
	once sync.Once
	dir  string
	err  error

	mu     sync.Mutex
	spaces map[int64]string // workspace directory by size
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.dir != "" {
		os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

// workspace returns a directory holding about size bytes that look like a
// workspace: a quarter in many small source files, the rest in a few
// large files, some compressible (logs, data) and some not (binaries,
// archives).
func workspace(b *testing.B, size int64) string {
	b.Helper()
	bench.once.Do(func() { bench.dir, bench.err = os.MkdirTemp("", "snapshot-bench-") })
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	bench.mu.Lock()
	defer bench.mu.Unlock()
	if dir, ok := bench.spaces[size]; ok {
		return dir
	}
	dir := filepath.Join(bench.dir, fmt.Sprintf("ws-%d", size))
	if err := generate(dir, size); err != nil {
		b.Fatal(err)
	}
	if bench.spaces == nil {
		bench.spaces = map[int64]string{}
	}
	bench.spaces[size] = dir
	return dir
}

func generate(dir string, size int64) error {
	r := rand.New(rand.NewPCG(uint64(size), 1))
	text := sourceText(r, 8<<20)
	write := func(name string, data []byte) error {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, data, 0o644)
	}
	slice := func(n int) []byte {
		off := r.IntN(len(text) - n)
		return text[off : off+n]
	}

	// Small source files, 100 B to 64 KiB, most of them small.
	var small int64
	for i := 0; small < size/4; i++ {
		n := 100 + int(r.ExpFloat64()*8192)
		n = min(n, 64<<10)
		name := fmt.Sprintf("src/pkg%02d/sub%02d/file%05d.go", i%37, i%11, i)
		if err := write(name, slice(n)); err != nil {
			return err
		}
		small += int64(n)
	}
	// Large files of 16 to 64 MiB: compressible text, then random bytes.
	rest := size - small
	for i, left := 0, rest*55/100; left > 0; i++ {
		n := min(left, int64(16<<20+r.IntN(48<<20)))
		var buf bytes.Buffer
		for int64(buf.Len()) < n {
			buf.Write(slice(64 << 10))
		}
		if err := write(fmt.Sprintf("data/log%02d.txt", i), buf.Bytes()[:n]); err != nil {
			return err
		}
		left -= n
	}
	for i, left := 0, rest*45/100; left > 0; i++ {
		n := min(left, int64(16<<20+r.IntN(48<<20)))
		if err := write(fmt.Sprintf("build/bin%02d", i), randomBytes(uint64(i), int(n))); err != nil {
			return err
		}
		left -= n
	}
	return nil
}

// sourceText returns n bytes that compress like source code (about 3.5x
// with zstd -1).
func sourceText(r *rand.Rand, n int) []byte {
	words := []string{"func", "return", "if", "err", "!=", "nil", "{", "}", "package", "import",
		"ctx", "context.Context", "string", "int64", "for", "range", ":=", "\n\t", "\n\t\t", "\n}\n",
		"fmt.Errorf(", "//", "the", "value", "len(", ")", "[]byte", "struct", "type", "var"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		b.WriteByte(' ')
		if r.IntN(6) == 0 {
			fmt.Fprintf(&b, "name%d", r.IntN(5000))
		}
	}
	return b.Bytes()[:n]
}

// cpuTime returns the CPU time, user and system, used so far by this
// process (who is syscall.RUSAGE_SELF) or by its waited-for children
// (syscall.RUSAGE_CHILDREN). Reported beside the wall time, it compares
// the work done even when the machine is shared.
func cpuTime(b *testing.B, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, who int, start time.Duration) {
	b.ReportMetric((cpuTime(b, who)-start).Seconds()/float64(b.N), "cpu-s/op")
}

func dirSize(b *testing.B, dir string) int64 {
	var total int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			total += fi.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return total
}

func BenchmarkSave(b *testing.B) {
	const firstSize = 256 << 20
	// first writes to a file:// bucket without the sidecar files in which
	// fileblob keeps object metadata (with an MD5 of each object): an
	// object store keeps those itself, Save sets none, and they double the
	// files written. first-sidecars is the same with them.
	for _, tc := range []struct {
		name     string
		sidecars bool
	}{{"first", false}, {"first-sidecars", true}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := workspace(b, firstSize)
			b.SetBytes(dirSize(b, dir))
			var stored int64
			cpu := cpuTime(b, syscall.RUSAGE_SELF)
			for b.Loop() {
				b.StopTimer()
				// A new bucket each time: nothing to reuse.
				opts := &fileblob.Options{Metadata: fileblob.MetadataDontWrite}
				if tc.sidecars {
					opts = nil
				}
				bucket, err := fileblob.OpenBucket(b.TempDir(), opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				info, err := New(bucket).Save(b.Context(), &dirSource{dir: dir}, SaveOptions{})
				if err != nil {
					b.Fatal(err)
				}
				stored = info.Stored
				bucket.Close()
			}
			reportCPU(b, syscall.RUSAGE_SELF, cpu)
			b.ReportMetric(float64(stored)/(1<<20), "stored-MiB")
		})
	}
	b.Run("tar-zstd", func(b *testing.B) {
		// The baseline: tar -c DIR | zstd -1, the real tools, to a file.
		dir := workspace(b, firstSize)
		b.SetBytes(dirSize(b, dir))
		out := filepath.Join(b.TempDir(), "out.tar.zst")
		cpu := cpuTime(b, syscall.RUSAGE_CHILDREN)
		for b.Loop() {
			cmd := exec.Command("/bin/sh", "-c", `/usr/bin/tar -C "$1" -cf - . | /usr/bin/zstd -1 -q -f -o "$2"`, "sh", dir, out)
			if msg, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, msg)
			}
		}
		reportCPU(b, syscall.RUSAGE_CHILDREN, cpu)
		fi, err := os.Stat(out)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size())/(1<<20), "stored-MiB")
	})
	b.Run("unchanged-1GiB", func(b *testing.B) {
		dir := workspace(b, 1<<30)
		// The files were written a moment ago; a 1ns margin lets the
		// source mark them unchanged, as it would files of a workspace
		// that has sat for more than 2s.
		s, _ := newStore(b, WithClockMargin(time.Nanosecond))
		opts := SaveOptions{Source: "bench", Kind: KindCheckpoint}
		parent, err := s.Save(b.Context(), &dirSource{dir: dir, marks: true}, opts)
		if err != nil {
			b.Fatal(err)
		}
		opts.Parent = parent.ID
		b.SetBytes(parent.Size)
		for b.Loop() {
			src := &dirSource{dir: dir, marks: true}
			info, err := s.Save(b.Context(), src, opts)
			if err != nil {
				b.Fatal(err)
			}
			if info.Stored != 0 || src.sent.Load() != 0 {
				b.Fatalf("stored %d bytes, read %d: the workspace did not change", info.Stored, src.sent.Load())
			}
		}
	})
}

func BenchmarkRestore(b *testing.B) {
	dir := workspace(b, 100<<20)
	s, _ := newStore(b)
	info, err := s.Save(b.Context(), &dirSource{dir: dir}, SaveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(info.Size)
	for b.Loop() {
		rc, err := s.Open(b.Context(), info.ID, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			b.Fatal(err)
		}
		rc.Close()
	}
}
