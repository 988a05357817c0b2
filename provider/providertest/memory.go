package providertest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// The memory tests put a sandbox's memory under pressure in each place a
// kernel keeps it for a sandbox's processes: pipe buffers, the page
// cache, tmpfs and anonymous memory. Whatever the provider does with the
// command (kills it as out of memory, or lets its writes fail), the
// sandbox must live on: its daemon serves, its workspace keeps what was
// written before, and the command never holds more than the limit.
func memoryTests() []test {
	return []test{
		{name: "Pipes", serial: true, fn: testMemoryPipes},
		{name: "Sockets", serial: true, fn: testMemorySockets},
		{name: "PageCache", serial: true, fn: testMemoryPageCache},
		{name: "Tmpfs", serial: true, fn: testMemoryTmpfs},
		{name: "Anonymous", serial: true, fn: testMemoryAnonymous},
	}
}

// pressureLimit is the memory limit of the sandboxes under pressure:
// small, so that the commands reach it in a moment.
const pressureLimit = 128 << 20

// underPressure creates a sandbox limited to pressureLimit with a file in
// its workspace, runs argv there rounds times, handing each outcome to
// check; then it checks that the sandbox survived whole.
func underPressure(t *testing.T, s *suite, rounds int, argv []string, check func(r result, err error)) {
	t.Helper()
	p := s.open(t)
	if !p.Capabilities().Memory {
		t.Skipf("skipped: provider %q does not enforce memory limits (Capabilities.Memory is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Memory = pressureLimit
	sb := s.mustCreate(t, p, spec)
	before := make([]byte, 1<<20)
	rand.Read(before)
	writeFile(t, sb, "before.bin", before, 0o644)

	// Again and again: memory a provider freed may not be free at once.
	for range rounds {
		r, err := execute(t, sb, provider.ExecRequest{Argv: argv})
		t.Logf("under memory pressure: exit code %d, signal %q, out of memory %v, err %v, stdout %s, stderr %s",
			r.ExitCode, r.Signal, r.OOMKilled, err, tail(r.stdout), tail(r.stderr))
		if errors.Is(err, errdefs.ErrSandboxLost) {
			t.Fatalf("the sandbox was lost under memory pressure (%v): the limit must end the command, not the sandbox", err)
		}
		check(r, err)
	}

	ctx := timeout(t, opTimeout)
	if info, err := sb.Info(ctx); err != nil || info.State != provider.StateRunning {
		t.Fatalf("Info after memory pressure: state %q, %v; want running", info.State, err)
	}
	checkServing(t, sb)
	if got, err := readFileErr(t, sb, "before.bin"); err != nil || !bytes.Equal(got, before) {
		t.Errorf("the workspace lost a file written before the memory pressure: %d bytes of %d read back, %v", len(got), len(before), err)
	}
	if out := mustSh(t, sb, "wc -c < before.bin"); strings.TrimSpace(out) != strconv.Itoa(len(before)) {
		t.Errorf("a command after the memory pressure sees before.bin with %q bytes, want %d", out, len(before))
	}
}

// checkEnded accepts a command that was killed as out of memory, or that
// ended by itself; any other error fails the test.
func checkEnded(t *testing.T, r result, err error, what string) {
	t.Helper()
	switch {
	case errors.Is(err, errdefs.ErrOutOfMemory):
		if !r.OOMKilled {
			t.Errorf("%s: ErrOutOfMemory but ExecResult.OOMKilled is false", what)
		}
	case err != nil:
		t.Fatalf("%s: %v; want the command killed as out of memory, or its writes failing", what, err)
	}
}

// pipesProgram opens pipes of 1 MiB (F_SETPIPE_SZ) and fills each without
// reading it, printing the bytes held after each; it holds them all until
// it prints "done".
const pipesProgram = `
import fcntl, os
F_SETPIPE_SZ = 1031
chunk = b"p" * 65536
total = 0
pipes = []
try:
    for i in range(480):
        r, w = os.pipe()
        pipes.append((r, w))
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        os.set_blocking(w, False)
        while True:
            try:
                total += os.write(w, chunk)
            except BlockingIOError:
                break
        print(total, flush=True)
except OSError as e:
    print("stopped:", e, flush=True)
print("done", total, flush=True)
`

func testMemoryPipes(t *testing.T, s *suite) {
	underPressure(t, s, 3, []string{python, "-c", pipesProgram}, func(r result, err error) {
		checkEnded(t, r, err, "480 pipes of 1 MiB filled")
		checkHeld(t, r, err, "pipe buffers")
	})
}

// socketsProgram fills socket pairs, their buffers raised as far as the
// sandbox allows, without reading them, as pipesProgram does pipes.
const socketsProgram = `
import socket
chunk = b"s" * 65536
total = 0
socks = []
try:
    for i in range(480):
        a, b = socket.socketpair()
        socks.append((a, b))
        for s in (a, b):
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            except OSError:
                pass
        a.setblocking(False)
        while True:
            try:
                total += a.send(chunk)
            except BlockingIOError:
                break
        print(total, flush=True)
except OSError as e:
    print("stopped:", e, flush=True)
print("done", total, flush=True)
`

func testMemorySockets(t *testing.T, s *suite) {
	underPressure(t, s, 2, []string{python, "-c", socketsProgram}, func(r result, err error) {
		checkEnded(t, r, err, "480 socket pairs filled")
		checkHeld(t, r, err, "socket buffers")
	})
}

// checkHeld fails the test if a program that ended by itself says, in
// its last line, "done N" with N bytes held at the limit or beyond.
func checkHeld(t *testing.T, r result, err error, what string) {
	t.Helper()
	lines := strings.Fields(r.stdout)
	if err != nil || len(lines) == 0 {
		return
	}
	held, _ := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	t.Logf("the command held %d MiB in %s and ended", held>>20, what)
	if held >= pressureLimit {
		t.Errorf("a command held %d MiB in %s in a sandbox limited to %d MiB", held>>20, what, pressureLimit>>20)
	}
}

// testMemoryPageCache writes and reads a workspace file three times the
// memory limit: the page cache it fills is the kernel's to give back, so
// the command may succeed; if it is killed instead, the sandbox lives on.
func testMemoryPageCache(t *testing.T, s *suite) {
	script := fmt.Sprintf("dd if=/dev/zero of=big bs=1M count=%d 2>/dev/null && cat big big > /dev/null && wc -c < big", 3*pressureLimit>>20)
	underPressure(t, s, 1, []string{"/bin/sh", "-c", script}, func(r result, err error) {
		checkEnded(t, r, err, "a file three times the memory limit written and read")
		if err == nil && r.ExitCode == 0 && strings.TrimSpace(r.stdout) != strconv.Itoa(3*pressureLimit) {
			t.Errorf("the file written under memory pressure has %q bytes, want %d", r.stdout, 3*pressureLimit)
		}
	})
}

// testMemoryTmpfs fills the sandbox's memory-backed file systems, /tmp
// and /dev/shm where it has them, with twice the memory limit each: the
// writes must fail, or the command be killed, before the files hold more
// than the limit.
func testMemoryTmpfs(t *testing.T, s *suite) {
	script := fmt.Sprintf(`
for d in /tmp /dev/shm; do
	[ -d $d ] && [ -w $d ] && head -c %d /dev/zero > $d/fill
done
cat /tmp/fill /dev/shm/fill 2>/dev/null | wc -c
`, 2*pressureLimit)
	underPressure(t, s, 1, []string{"/bin/sh", "-c", script}, func(r result, err error) {
		checkEnded(t, r, err, "/tmp and /dev/shm filled with twice the memory limit")
		if err == nil {
			held, _ := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
			t.Logf("/tmp and /dev/shm hold %d MiB", held>>20)
			if held >= pressureLimit {
				t.Errorf("/tmp and /dev/shm hold %d MiB in a sandbox limited to %d MiB", held>>20, pressureLimit>>20)
			}
		}
	})
}

// testMemoryAnonymous allocates four times the limit: the command is
// killed and reported out of memory, as the kernel reports it.
func testMemoryAnonymous(t *testing.T, s *suite) {
	program := fmt.Sprintf(`
b = bytearray(%d)
for i in range(0, len(b), 4096):
    b[i] = 1
print("allocated")
`, 4*pressureLimit)
	underPressure(t, s, 1, []string{python, "-c", program}, func(r result, err error) {
		checkErrIs(t, err, errdefs.ErrOutOfMemory, "a command allocating four times the memory limit")
		if !r.OOMKilled {
			t.Errorf("ExecResult.OOMKilled = false (exit code %d, signal %q)", r.ExitCode, r.Signal)
		}
		if strings.Contains(r.stdout, "allocated") {
			t.Errorf("the command allocated four times the memory limit")
		}
	})
}
