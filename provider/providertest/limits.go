package providertest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// The limit tests are heavy: each has the machine to itself.
func limitTests() []test {
	return []test{
		{name: "OutOfMemory", serial: true, fn: testOutOfMemory},
		{name: "ForkBomb", serial: true, fn: testForkBomb},
		{name: "HugeOutput", serial: true, fn: testHugeOutput},
		{name: "LargeFile", serial: true, fn: testLargeFile},
		{name: "Disk", serial: true, fn: testDisk},
	}
}

// memoryBound is how much memory moving gigabytes through a provider may
// take, in the caller and in the sandbox's daemon: output and files must
// stream, never be held whole.
const memoryBound = 64 << 20

func testOutOfMemory(t *testing.T, s *suite) {
	p := s.open(t)
	if !p.Capabilities().Memory {
		t.Skipf("skipped: provider %q does not enforce memory limits (Capabilities.Memory is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Memory = 64 << 20
	sb := s.mustCreate(t, p, spec)

	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{python, "-c", `
b = bytearray(512 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
print("allocated")
`}})
	checkErrIs(t, err, errdefs.ErrOutOfMemory, "Exec of a command allocating 512 MiB in a 64 MiB sandbox")
	if !r.OOMKilled {
		t.Errorf("ExecResult.OOMKilled = false (exit code %d, signal %q, stderr %q)", r.ExitCode, r.Signal, tail(r.stderr))
	}
	if strings.Contains(r.stdout, "allocated") {
		t.Errorf("the command allocated 512 MiB in a sandbox limited to 64 MiB")
	}
	checkServing(t, sb)
}

func testForkBomb(t *testing.T, s *suite) {
	p := s.open(t)
	if !p.Capabilities().Pids {
		t.Skipf("skipped: provider %q does not enforce process limits (Capabilities.Pids is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Pids = 64
	sb := s.mustCreate(t, p, spec)

	start := time.Now()
	r, err := execute(t, sb, provider.ExecRequest{
		Argv: []string{python, "-c", `
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
`},
		Timeout: 3 * time.Second,
	})
	t.Logf("the fork bomb ended after %v: exit code %d, signal %q, timed out %v, err %v", time.Since(start), r.ExitCode, r.Signal, r.TimedOut, err)
	switch {
	case errors.Is(err, errdefs.ErrTimeout), errors.Is(err, errdefs.ErrOutOfMemory):
	case err != nil:
		t.Errorf("Exec of a fork bomb: %v; want a timeout or a non-zero exit", err)
	case r.ExitCode == 0:
		t.Errorf("a fork bomb exited 0")
	}
	// Ending 64 processes may take the provider a moment.
	eventually(t, time.Minute, "the sandbox serves again after a fork bomb", func() (bool, string) {
		r, err := execute(t, sb, provider.ExecRequest{Argv: []string{"echo", "ok"}})
		if err != nil {
			return false, err.Error()
		}
		return r.stdout == "ok\n", "stdout " + r.stdout + ", stderr " + r.stderr
	})
	if out, err := exec.CommandContext(t.Context(), "/bin/sh", "-c", "echo ok").Output(); err != nil || string(out) != "ok\n" {
		t.Errorf("the test's own host cannot start a process after the fork bomb: %q, %v", out, err)
	}
}

// streamSize is what testHugeOutput and testLargeFile move: four times
// memoryBound unless the harness says less, never under twice, so that
// a provider holding it whole, on either side, goes past the bound with
// room to spare.
func (s *suite) streamSize(t *testing.T) int64 {
	switch n := s.h.StreamSize; {
	case n == 0:
		return 4 * memoryBound
	case n < 2*memoryBound:
		t.Fatalf("Harness.StreamSize %d MiB: want at least %d MiB, twice the memory bound", n>>20, 2*memoryBound>>20)
	}
	return s.h.StreamSize
}

// testHugeOutput streams streamSize of output: neither side may hold it.
func testHugeOutput(t *testing.T, s *suite) {
	size := s.streamSize(t)
	_, sb := s.sandbox(t)
	var out countingWriter
	mem := watchMemory()
	ctx := timeout(t, heavyTimeout)
	start := time.Now()
	r, err := executeCtx(ctx, sb, provider.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero", size), Stdout: &out})
	mem.check(t, fmt.Sprintf("streaming %d MiB of output", size>>20))
	t.Logf("%d MiB of output took %v", size>>20, time.Since(start))
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if r.ExitCode != 0 {
		t.Errorf("exit code %d, stderr %q", r.ExitCode, tail(r.stderr))
	}
	if r.StdoutBytes != size {
		t.Errorf("StdoutBytes = %d, want %d", r.StdoutBytes, int64(size))
	}
	if n := out.n.Load(); n != size {
		t.Errorf("Stdout received %d bytes, want %d", n, int64(size))
	}
	if r.Truncated {
		t.Errorf("ExecResult.Truncated is set, though the caller read the output as it came")
	}
	checkDaemonRSS(t, s, sb)
}

// testLargeFile moves streamSize each way, hashing as it goes: neither
// side may hold the file in memory.
func testLargeFile(t *testing.T, s *suite) {
	size := s.streamSize(t)
	p := s.open(t)
	spec := s.newSpec(t)
	// The provider's default disk limit may be smaller than the file.
	if p.Capabilities().Disk {
		spec.Resources.Disk = 3 * size
	}
	sb := s.mustCreate(t, p, spec)
	ctx := timeout(t, heavyTimeout)

	mem := watchMemory()
	sent := sha256.New()
	var n atomic.Int64
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{3}), size), sent)
	start := time.Now()
	if err := sb.WriteFile(ctx, "big.bin", countReader{src, &n}, 0o644); err != nil {
		t.Fatalf("WriteFile of %d MiB: %v", size>>20, err)
	}
	t.Logf("writing %d MiB took %v", size>>20, time.Since(start))
	if n.Load() != size {
		t.Fatalf("WriteFile consumed %d bytes of its reader, want %d", n.Load(), int64(size))
	}
	want := hex.EncodeToString(sent.Sum(nil))

	if fi, ok := entry(listDir(t, sb, "."), "big.bin"); !ok || fi.Size != size {
		t.Errorf("ListDir shows big.bin with size %d (present: %v), want %d", fi.Size, ok, int64(size))
	}
	if out := mustSh(t, sb, "sha256sum big.bin"); !strings.HasPrefix(out, want) {
		t.Errorf("inside the sandbox, sha256sum big.bin = %q, want %s", out, want)
	}

	start = time.Now()
	rc, err := sb.ReadFile(ctx, "big.bin")
	if err != nil {
		t.Fatalf("ReadFile of %d MiB: %v", size>>20, err)
	}
	got := sha256.New()
	copied, err := io.Copy(got, rc)
	rc.Close()
	if err != nil {
		t.Fatalf("reading %d MiB after %d bytes: %v", size>>20, copied, err)
	}
	t.Logf("reading %d MiB took %v", size>>20, time.Since(start))
	mem.check(t, fmt.Sprintf("writing and reading a %d MiB file", size>>20))
	if copied != size {
		t.Errorf("ReadFile returned %d bytes, want %d", copied, int64(size))
	}
	if hex.EncodeToString(got.Sum(nil)) != want {
		t.Errorf("ReadFile returned other bytes than WriteFile was given (sha256 differs)")
	}
	checkDaemonRSS(t, s, sb)
	remove(t, sb, "big.bin")
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// checkDaemonRSS checks, in a subtest of its own so that it can skip alone,
// that the sandbox's daemon did not hold what went through it.
func checkDaemonRSS(t *testing.T, s *suite, sb provider.Sandbox) {
	t.Run("DaemonRSS", func(t *testing.T) {
		if s.h.DaemonRSS == nil {
			t.Skip("skipped: Harness.DaemonRSS is nil, so the in-sandbox daemon's memory cannot be measured")
		}
		rss := s.h.DaemonRSS(t, sb)
		t.Logf("the in-sandbox daemon's resident memory: %d MiB", rss>>20)
		if rss >= memoryBound {
			t.Errorf("the in-sandbox daemon's resident memory is %d MiB, want under %d MiB", rss>>20, memoryBound>>20)
		}
	})
}

// memWatch samples the test process's memory while heavy work runs.
type memWatch struct {
	base     runtime.MemStats
	peakHeap atomic.Uint64
	stop     chan struct{}
	done     chan struct{}
}

func watchMemory() *memWatch {
	runtime.GC()
	m := &memWatch{stop: make(chan struct{}), done: make(chan struct{})}
	runtime.ReadMemStats(&m.base)
	m.peakHeap.Store(m.base.HeapInuse)
	go func() {
		defer close(m.done)
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > m.peakHeap.Load() {
				m.peakHeap.Store(ms.HeapInuse)
			}
		}
	}()
	return m
}

// check stops the watch and fails the test if memory grew by memoryBound
// or more since it started.
func (m *memWatch) check(t *testing.T, what string) {
	t.Helper()
	close(m.stop)
	<-m.done
	var now runtime.MemStats
	runtime.ReadMemStats(&now)
	heap := int64(m.peakHeap.Load()) - int64(m.base.HeapInuse)
	sys := int64(now.Sys) - int64(m.base.Sys)
	t.Logf("%s: the test process's heap in use grew by at most %d MiB, its memory from the OS by %d MiB", what, heap>>20, sys>>20)
	if heap >= memoryBound {
		t.Errorf("%s made the test process's heap grow by %d MiB; the provider must stream, using under %d MiB", what, heap>>20, memoryBound>>20)
	}
	if sys >= memoryBound {
		t.Errorf("%s made the test process take %d MiB more from the OS; the provider must stream, using under %d MiB", what, sys>>20, memoryBound>>20)
	}
}
