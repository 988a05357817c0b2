package providertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// The attack tests are what sandboxed code did to a provider from the
// inside: exhaust kernel counters the host shares, open sockets to the
// hypervisor, watch the host's files, crash its own daemon, and look for
// what leaked in. Those that exhaust host-wide counters run alone: a
// failing provider starves the test process for a moment.
func attackTests() []test {
	return []test{
		{name: "InotifyInstances", serial: true, fn: testInotifyInstances},
		{name: "InotifyInstancesManySandboxes", serial: true, fn: testInotifyManySandboxes},
		{name: "InotifyWatches", serial: true, fn: testInotifyWatches},
		{name: "FanotifyGroups", serial: true, fn: testFanotifyGroups},
		{name: "PendingSignals", serial: true, fn: testPendingSignals},
		{name: "OpenFiles", serial: true, fn: testOpenFiles},
		{name: "SocketFamilies", fn: testSocketFamilies},
		{name: "WatchHostFiles", fn: testWatchHostFiles},
		{name: "InheritedFiles", fn: testInheritedFiles},
		{name: "Identity", fn: testIdentity},
		{name: "CgroupView", fn: testCgroupView},
		{name: "MountFlags", fn: testMountFlags},
		{name: "FillTmp", serial: true, fn: testFillTmp},
		{name: "ManySmallProcesses", serial: true, fn: testManySmallProcesses},
		{name: "ForkBombDaemonSurvives", serial: true, fn: testForkBombDaemon},
		{name: "MemoryFullDaemonServes", serial: true, fn: testMemoryFull},
		{name: "SocketSwappedForLink", fn: testSocketSwapped},
	}
}

// maxOpenFilesPerProcess bounds how many files one process in a sandbox
// may hold open: the host's own limit is shared by every sandbox.
const maxOpenFilesPerProcess = 1 << 14

// pythonPrelude gives the programs below libc and the errno of its
// last call.
const pythonPrelude = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def err():
    return os.strerror(ctypes.get_errno())
`

// hold runs a python program that takes some kernel resource, prints one
// line starting with "held" when it has taken all it can, and keeps it
// until its standard input closes. While the program holds it, check
// runs on the host with that line. It returns all the program printed.
func hold(t *testing.T, sb provider.Sandbox, program string, check func(held string)) string {
	t.Helper()
	out, line, r, err := holdRun(t, sb, program, check)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if r.ExitCode != 0 || !strings.HasPrefix(line, "held") {
		t.Fatalf("the program failed: exit code %d, stdout %q, stderr %s", r.ExitCode, out, tail(r.stderr))
	}
	t.Logf("in the sandbox: %s", line)
	return out
}

// holdRun is hold without judging how the program ended.
func holdRun(t *testing.T, sb provider.Sandbox, program string, check func(held string)) (out, line string, r result, err error) {
	t.Helper()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	w := newSignalWriter()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r, err = execute(t, sb, provider.ExecRequest{
			Argv: []string{python, "-c", pythonPrelude + program}, Stdin: stdinR, Stdout: w,
		})
	}()
	select {
	case <-w.first:
	case <-done:
	}
	// The first write may hold part of the line: wait for all of it.
	eventually(t, opTimeout, "the program reports what it holds", func() (bool, string) {
		select {
		case <-done:
			return true, ""
		default:
		}
		return strings.Contains(w.String(), "\n"), w.String()
	})
	line, _, _ = strings.Cut(w.String(), "\n")
	if strings.HasPrefix(line, "held") {
		check(line)
	}
	stdinW.Close()
	<-done
	return w.String(), line, r, err
}

// inotifyInstances takes all the inotify instances it can, for hold.
const inotifyInstances = `
fds = []
why = "no limit met"
while len(fds) < 100000:
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        why = err()
        break
    fds.append(fd)
print("held", len(fds), "inotify instances:", why, flush=True)
sys.stdin.read()
`

func testInotifyInstances(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	hold(t, sb, inotifyInstances, func(string) {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Errorf("the host cannot create an inotify instance while a sandbox holds all it can: %v", err)
			return
		}
		unix.Close(fd)
	})
}

// testInotifyManySandboxes has several sandboxes take all the inotify
// instances they can at once, more together than the host allows one user
// (128 by default): what each takes must be charged to none but itself.
// Each gets as many as the first, and the host's root and a new sandbox
// can still make one.
func testInotifyManySandboxes(t *testing.T, s *suite) {
	p := s.open(t)
	sbs := s.mustCreateAll(t, p, 10)
	var held []string
	var holdFrom func(i int)
	holdFrom = func(i int) {
		if i < len(sbs) {
			hold(t, sbs[i], inotifyInstances, func(line string) {
				n, _, _ := strings.Cut(strings.TrimPrefix(line, "held "), " ")
				held = append(held, n)
				holdFrom(i + 1)
			})
			return
		}
		if slices.ContainsFunc(held, func(n string) bool { return n != held[0] }) {
			t.Errorf("instances each sandbox could take, one after another: %v; want as many each", held)
		}
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Errorf("the host cannot create an inotify instance while %d sandboxes hold all they can: %v", len(sbs), err)
		} else {
			unix.Close(fd)
		}
		sb := s.mustCreate(t, p, s.newSpec(t))
		out := mustPython(t, sb, pythonPrelude+`
fd = libc.inotify_init1(os.O_CLOEXEC)
print(err() if fd < 0 else "ok")
`)
		if out != "ok\n" {
			t.Errorf("a new sandbox cannot create an inotify instance while %d others hold all they can: %s", len(sbs), out)
		}
	}
	holdFrom(0)
}

// inotifyWatchesCap is how many inotify watches testInotifyWatches
// takes where no limit stops it (gVisor keeps a sandbox's watches in its
// own kernel): one instance's files past the host's limit of a user
// (fs.inotify.max_user_watches), so that a sandbox charged against that
// limit meets it first, and one charged against none holds more than
// the host lets any user hold. A million where the host does not say:
// on gVisor each watch is a system call of the sentry's, and a million
// took a minute, where the host's 192540 takes a fifth of it.
func inotifyWatchesCap() int {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_watches")
	if err != nil {
		return 1000000
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 1000000
	}
	return n + 4000
}

func testInotifyWatches(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	hostFile := filepath.Join(t.TempDir(), "watched")
	if err := os.WriteFile(hostFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Watches count per instance and inode: a few thousand files in a
	// few instances reach any limit.
	hold(t, sb, fmt.Sprintf(`
IN_MODIFY = 2
d = "/tmp/watched"
os.makedirs(d, exist_ok=True)
paths = []
for i in range(4000):
    p = d + "/" + str(i)
    open(p, "w").close()
    paths.append(p.encode())
n, why = 0, ""
while not why and n < %d:
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        why = "inotify_init1: " + err()
        break
    for p in paths:
        if libc.inotify_add_watch(fd, p, IN_MODIFY) < 0:
            why = "inotify_add_watch: " + err()
            break
        n += 1
print("held", n, "inotify watches:", why, flush=True)
sys.stdin.read()
`, inotifyWatchesCap()), func(string) {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
		if err != nil {
			t.Errorf("the host cannot create an inotify instance while a sandbox holds all the watches it can: %v", err)
			return
		}
		defer unix.Close(fd)
		if _, err := unix.InotifyAddWatch(fd, hostFile, unix.IN_MODIFY); err != nil {
			t.Errorf("the host cannot add an inotify watch while a sandbox holds all it can: %v", err)
		}
	})
}

func testFanotifyGroups(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	// Unprivileged fanotify (Linux 5.13 on) needs FAN_REPORT_FID.
	hold(t, sb, `
FAN_CLOEXEC, FAN_REPORT_FID = 0x1, 0x200
fds = []
why = "no limit met"
while len(fds) < 100000:
    fd = libc.fanotify_init(FAN_CLOEXEC | FAN_REPORT_FID, os.O_RDONLY)
    if fd < 0:
        why = err()
        break
    fds.append(fd)
print("held", len(fds), "fanotify groups:", why, flush=True)
sys.stdin.read()
`, func(string) {
		fd, err := unix.FanotifyInit(unix.FAN_CLOEXEC|unix.FAN_CLASS_NOTIF, unix.O_RDONLY)
		if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
			return // the test process may not use fanotify at all
		}
		if err != nil {
			t.Errorf("the host cannot create a fanotify group while a sandbox holds all it can: %v", err)
			return
		}
		unix.Close(fd)
	})
}

// queueSignal is a python program that blocks a real-time signal and
// queues it to itself until the kernel refuses, printing how many it
// queued.
const queueSignal = `
import signal
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
limit = int(sys.argv[1]) if len(sys.argv) > 1 else 10000000
n, why = 0, "no limit met"
while n < limit:
    if libc.sigqueue(os.getpid(), sig, ctypes.c_void_p(0)) < 0:
        why = err()
        break
    n += 1
`

func testPendingSignals(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	hold(t, sb, queueSignal+`
print("held", n, "queued signals:", why, flush=True)
sys.stdin.read()
`, func(string) {
		// A few signals, as a busy host process might have pending.
		prog := pythonPrelude + queueSignal + `print(n, why)`
		out, err := exec.CommandContext(t.Context(), python, "-c", prog, "100").CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "100 ") {
			t.Errorf("the host cannot queue 100 signals while a sandbox holds all it can: %s %v", out, err)
		}
	})
}

func testOpenFiles(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	out := mustPython(t, sb, `
import os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
except (OSError, ValueError):
    pass
fds, why = [], "no limit met"
while len(fds) < 2000000:
    try:
        fds.append(os.open("/dev/null", os.O_RDONLY))
    except OSError as e:
        why = e.strerror
        break
print(len(fds), why)
`)
	t.Logf("one process in the sandbox opened: %s", out)
	var n int
	var why string
	if _, err := fmt.Sscanf(out, "%d %s", &n, &why); err != nil {
		t.Fatalf("unexpected output %q", out)
	}
	if n > maxOpenFilesPerProcess {
		t.Errorf("one process in a sandbox opened %d files, want at most %d", n, maxOpenFilesPerProcess)
	}
}

func testSocketFamilies(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	out := mustPython(t, sb, `
import socket
families = [("AF_UNIX", 1), ("AF_INET", 2), ("AF_INET6", 10), ("AF_PACKET", 17), ("AF_ALG", 38), ("AF_VSOCK", 40), ("AF_BLUETOOTH", 31), ("AF_CAN", 29), ("AF_XDP", 44)]
for name, fam in families:
    try:
        socket.socket(fam, socket.SOCK_DGRAM if fam in (1, 2, 10, 17, 29) else socket.SOCK_STREAM if fam != 38 else socket.SOCK_SEQPACKET).close()
        print(name, "ok")
    except OSError as e:
        print(name, "refused", e.errno)
`)
	got := map[string]string{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		got[f[0]] = f[1]
	}
	for _, fam := range []string{"AF_UNIX", "AF_INET", "AF_INET6"} {
		if got[fam] != "ok" {
			t.Errorf("socket(%s) is refused in a sandbox; commands need it", fam)
		}
	}
	// None of these is isolated by a network namespace, or of use to a
	// sandbox; AF_VSOCK reaches the hypervisor.
	for _, fam := range []string{"AF_VSOCK", "AF_ALG", "AF_PACKET", "AF_BLUETOOTH", "AF_CAN", "AF_XDP"} {
		if got[fam] != "refused" {
			t.Errorf("socket(%s) works in a sandbox: %s", fam, got[fam])
		}
	}
}

// testWatchHostFiles watches /usr/bin from a sandbox while the host reads
// a file there: the sandbox must not see it. Events of the sandbox's own
// (a hosted provider's service runs a shell in the machine for each of
// berth's calls) name other files; an event naming the file the host
// read is the leak.
func testWatchHostFiles(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	var target string
	for _, name := range []string{"env", "sh", "true"} {
		if _, err := os.Stat("/usr/bin/" + name); err == nil {
			target = "/usr/bin/" + name
			break
		}
	}
	if target == "" {
		t.Fatal("the host has none of /usr/bin/env, sh, true to read")
	}
	out := hold(t, sb, `
IN_ACCESS, IN_OPEN, IN_CLOSE_NOWRITE, IN_NONBLOCK = 0x1, 0x20, 0x10, 0o4000
fd = libc.inotify_init1(IN_NONBLOCK)
if fd < 0:
    print("held nothing: inotify_init1:", err(), flush=True)
    sys.stdin.read()
    sys.exit(0)
wds = libc.inotify_add_watch(fd, b"/usr/bin", IN_ACCESS | IN_OPEN | IN_CLOSE_NOWRITE)
if wds < 0:
    wds = err()
print("held watches", wds, flush=True)
sys.stdin.read()
try:
    events = os.read(fd, 65536)
except BlockingIOError:
    events = b""
names, i = set(), 0
while i + 16 <= len(events):
    n = int.from_bytes(events[i+12:i+16], "little")
    names.add(events[i+16:i+16+n].rstrip(b"\0").decode(errors="replace"))
    i += 16 + n
print("events", len(events), "names", " ".join(sorted(names)) or "-")
`, func(string) {
		f, err := os.Open(target)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Read(make([]byte, 16))
		f.Close()
	})
	t.Logf("in the sandbox: %s", out)
	_, names, ok := strings.Cut(strings.TrimSpace(out[strings.LastIndex(out, "events "):]), " names ")
	if !ok {
		t.Fatalf("the watch in the sandbox said %q", out)
	}
	if slices.Contains(strings.Fields(names), filepath.Base(target)) {
		t.Errorf("a sandbox watching /usr/bin saw the host read %s: %s", target, out)
	}
}

func testInheritedFiles(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	// ls's own descriptor on the directory is the only one past stderr.
	out := mustSh(t, sb, "ls /proc/self/fd")
	fds := strings.Fields(out)
	if len(fds) != 4 || !slices.Equal(fds[:3], []string{"0", "1", "2"}) {
		links := mustSh(t, sb, "ls -l /proc/self/fd")
		t.Errorf("a command starts with descriptors %v, want 0, 1, 2 only (and ls's own):\n%s", fds, links)
	}
}

func testIdentity(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	out := mustSh(t, sb, `id -u; id -un; uname -n; cat /etc/hostname 2>/dev/null || echo -`)
	f := strings.Fields(out)
	if len(f) != 4 {
		t.Fatalf("unexpected output %q", out)
	}
	uid, name, uts, etcHostname := f[0], f[1], f[2], f[3]
	host, _ := os.Hostname()
	hostEtc, _ := os.ReadFile("/etc/hostname")
	if uts == host {
		t.Errorf("the sandbox's host name is the host's, %q", host)
	}
	if etcHostname == strings.TrimSpace(string(hostEtc)) {
		t.Errorf("the sandbox's /etc/hostname is the host's, %q", etcHostname)
	}
	if name == uid {
		t.Errorf("the sandbox user (uid %s) has no name", uid)
	}
	if hostName, err := exec.Command("id", "-un", uid).Output(); err == nil && strings.TrimSpace(string(hostName)) == name {
		t.Errorf("the sandbox user is the host's user %q", name)
	}
}

func testCgroupView(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	out := string(mustSh(t, sb, "cat /proc/self/cgroup"))
	for line := range strings.Lines(out) {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 && parts[2] != "/" {
			t.Errorf("/proc/self/cgroup in a sandbox shows the host's cgroup path %q; want / (a cgroup namespace rooted at the sandbox's cgroup):\n%s", parts[2], out)
			break
		}
	}
	if strings.Contains(out, sb.ID()) {
		t.Errorf("/proc/self/cgroup names the sandbox's id:\n%s", out)
	}
}

// testMountFlags checks that nothing a sandbox writes can be a setuid
// program or a device node, in the sandbox or on the host's disk.
func testMountFlags(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, "cp /bin/true suid && chmod 4755 suid")
	// The flags the kernel reports for the mount each directory is on,
	// by statvfs: gVisor's /proc/self/mountinfo leaves nodev out.
	for _, dir := range []string{"/workspace", "/tmp", "/dev/shm"} {
		out := mustPython(t, sb, `
import os, sys
f = os.statvfs(sys.argv[1]).f_flag
print(" ".join(n for n, b in (("nosuid", os.ST_NOSUID), ("nodev", os.ST_NODEV)) if f & b))
`, dir)
		for _, want := range []string{"nosuid", "nodev"} {
			if !slices.Contains(strings.Fields(out), want) {
				t.Errorf("%s is mounted with %q, without %s", dir, strings.TrimSpace(out), want)
			}
		}
	}
}

// testFillTmp fills /tmp and /dev/shm, whose pages belong to no process
// and so cannot be freed by killing one: the sandbox must refuse the
// writes, or kill the writer, and keep serving.
func testFillTmp(t *testing.T, s *suite) {
	p := s.open(t)
	if !p.Capabilities().Memory {
		t.Skipf("skipped: provider %q does not enforce memory limits (Capabilities.Memory is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Memory = 128 << 20
	sb := s.mustCreate(t, p, spec)
	for _, dir := range []string{"/tmp", "/dev/shm"} {
		r, err := execute(t, sb, provider.ExecRequest{Shell: "head -c 1000000000 /dev/zero > " + dir + "/fill"})
		t.Logf("filling %s: exit code %d, signal %q, err %v, stderr %s", dir, r.ExitCode, r.Signal, err, tail(r.stderr))
		if err != nil && !errors.Is(err, errdefs.ErrOutOfMemory) {
			t.Errorf("filling %s: %v; want a failing command or ErrOutOfMemory", dir, err)
		}
		if err == nil && r.ExitCode == 0 {
			t.Errorf("writing 1 GB to %s in a 128 MiB sandbox succeeded", dir)
		}
		checkServing(t, sb)
	}
	// Both full at once, and a command that needs memory on top.
	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{python, "-c", `
b = bytearray(256 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
`}})
	t.Logf("allocating with /tmp and /dev/shm full: exit code %d, signal %q, err %v", r.ExitCode, r.Signal, err)
	checkServing(t, sb)
	mustSh(t, sb, "rm /tmp/fill /dev/shm/fill")
	checkServing(t, sb)
}

// testManySmallProcesses runs the sandbox out of memory with processes
// each smaller than the daemon: the kernel must not pick the daemon.
func testManySmallProcesses(t *testing.T, s *suite) {
	p := s.open(t)
	if !p.Capabilities().Memory {
		t.Skipf("skipped: provider %q does not enforce memory limits (Capabilities.Memory is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Memory = 96 << 20
	sb := s.mustCreate(t, p, spec)
	// Each child holds 2 MiB and waits; the parent forks until one dies.
	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{python, "-c", `
import os, signal, sys, time
kids = []
r, w = os.pipe()
for i in range(200):
    pid = os.fork()
    if pid == 0:
        os.close(w)
        b = bytearray(2 << 20)
        for j in range(0, len(b), 4096):
            b[j] = 1
        os.read(r, 1)
        os._exit(0)
    kids.append(pid)
os.close(w)
for k in kids:
    os.waitpid(k, 0)
`}, Timeout: time.Minute})
	t.Logf("200 processes of 2 MiB in 96 MiB: exit code %d, signal %q, err %v", r.ExitCode, r.Signal, err)
	checkServing(t, sb)
	ctx := timeout(t, opTimeout)
	if info, err := sb.Info(ctx); err != nil || info.State != provider.StateRunning {
		t.Errorf("Info after memory ran out: state %q, %v; want running", info.State, err)
	}
}

// testForkBombDaemon fills the process limit and keeps it full while the
// daemon is asked for work: it must keep a reserve of its own.
func testForkBombDaemon(t *testing.T, s *suite) {
	p := s.open(t)
	if !p.Capabilities().Pids {
		t.Skipf("skipped: provider %q does not enforce process limits (Capabilities.Pids is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Pids = 128
	sb := s.mustCreate(t, p, spec)
	// The bomb's processes wait instead of exiting, so the limit stays
	// full; it reports when fork fails.
	hold(t, sb, `
import time
r, w = os.pipe()
n, why = 0, "no limit met"
while n < 100000:
    try:
        pid = os.fork()
    except OSError as e:
        why = e.strerror
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    n += 1
print("held", n, "processes:", why, flush=True)
sys.stdin.read()
`, func(string) {
		// Concurrent requests make the daemon want threads.
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := execute(t, sb, provider.ExecRequest{Argv: []string{"/bin/true"}})
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Logf("a command while the process limit is full: %v", err)
			}
		}
	})
	checkServing(t, sb)
	ctx := timeout(t, opTimeout)
	if info, err := sb.Info(ctx); err != nil || info.State != provider.StateRunning {
		t.Errorf("Info after a fork bomb: state %q, %v; want running", info.State, err)
	}
}

// testMemoryFull has commands take all the memory they can, in /tmp and
// in a process that holds it, then asks the daemon for work that needs
// memory of its own: an export, a read, a command. The daemon must do it
// promptly, and without the kernel killing the process that holds the
// memory. A command that takes more than it can is killed and reported
// out of memory.
func testMemoryFull(t *testing.T, s *suite) {
	p := s.open(t)
	if !p.Capabilities().Memory {
		t.Skipf("skipped: provider %q does not enforce memory limits (Capabilities.Memory is false)", p.Name())
	}
	spec := s.newSpec(t)
	spec.Resources.Memory = 128 << 20
	sb := s.mustCreate(t, p, spec)
	mustSh(t, sb, "head -c 8388608 /dev/urandom > data")
	data := readFile(t, sb, "data")
	mustSh(t, sb, "head -c 16777216 /dev/zero > /tmp/fill")
	// How much a command can take: a MiB at a time until it is killed.
	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{python, "-c", `
b = []
while True:
    b.append(bytearray(1 << 20))
    for i in range(0, 1 << 20, 4096):
        b[-1][i] = 1
    print(len(b), flush=True)
`}})
	lines := strings.Fields(r.stdout)
	if !errors.Is(err, errdefs.ErrOutOfMemory) || len(lines) == 0 {
		t.Fatalf("a command taking all the memory it can: exit code %d, signal %q, %d MiB, err %v; want ErrOutOfMemory", r.ExitCode, r.Signal, len(lines), err)
	}
	most := len(lines)
	t.Logf("a command could take %d MiB with /tmp holding 16 MiB", most)
	// Held below: nearly that. A limit enforced by watching (gVisor's
	// daemon polls; Harness.ApproximateMemory) lets a fast command
	// overshoot it, the more so on a loaded machine: there a quarter
	// short of the limit less /tmp and a reserve.
	held := most - 8
	if s.h.ApproximateMemory != "" {
		held = min(most, 128-16-16) * 3 / 4
	}
	checkServing(t, sb)

	program := fmt.Sprintf(`
b = []
while len(b) < %d:
    b.append(bytearray(1 << 20))
    for i in range(0, 1 << 20, 4096):
        b[-1][i] = 1
print("held", len(b), "MiB", flush=True)
sys.stdin.read()
`, held)
	daemonWork := func(string) {
		const prompt = 10 * time.Second
		start := time.Now()
		ctx := timeout(t, prompt)
		rc, err := sb.Export(ctx)
		var n int64
		if err == nil {
			n, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil || n < int64(len(data)) {
			t.Errorf("Export with the memory full: %d bytes, %v", n, err)
		}
		t.Logf("Export with the memory full: %d bytes in %v", n, time.Since(start))

		start = time.Now()
		got, err := readFileErr(t, sb, "data")
		if err != nil || !slices.Equal(got, data) {
			t.Errorf("ReadFile with the memory full: %d bytes of %d, %v", len(got), len(data), err)
		}
		t.Logf("ReadFile with the memory full: %v", time.Since(start))

		start = time.Now()
		r, err := executeCtx(timeout(t, prompt), sb, provider.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || r.ExitCode != 0 {
			t.Errorf("a command with the memory full: exit code %d, %v", r.ExitCode, err)
		}
		t.Logf("a command with the memory full: %v", time.Since(start))
	}
	if reason := s.h.ApproximateMemory; reason != "" {
		// The daemon's own reads count against a limit enforced by
		// watching: they may end the command that holds the memory.
		out, line, r, err := holdRun(t, sb, program, daemonWork)
		killed := errors.Is(err, errdefs.ErrOutOfMemory) || err == nil && r.Signal != ""
		if !strings.HasPrefix(line, "held") || err != nil && !killed || !killed && r.ExitCode != 0 {
			t.Fatalf("the program failed: exit code %d, signal %q, %v, stdout %q, stderr %s", r.ExitCode, r.Signal, err, out, tail(r.stderr))
		}
		t.Logf("in the sandbox: %s (the memory limit is approximate: %s; the command was killed meanwhile: %v)", line, reason, killed)
	} else {
		hold(t, sb, program, daemonWork)
	}
	checkServing(t, sb)
}

// testSocketSwapped: a sandbox that replaces its daemon's socket with a
// link to another sandbox's (a Docker image's root did, from a
// healthcheck) must not take the host there. A host that dials it
// afresh, as another process would, reaches the sandbox's own daemon or
// fails with a typed error; it never runs a command in, writes to or
// reads from the other sandbox, and writes nothing into the other's
// socket directory.
func testSocketSwapped(t *testing.T, s *suite) {
	if s.h.DaemonSocket == nil {
		t.Skip("the provider reaches its daemons through no socket on the host")
	}
	p := s.open(t)
	a := s.mustCreate(t, p, s.newSpec(t))
	b := s.mustCreate(t, p, s.newSpec(t))
	mustSh(t, a, "echo a > who")
	mustSh(t, b, "echo b > who")
	sockA, sockB := s.h.DaemonSocket(t, a), s.h.DaemonSocket(t, b)
	dirB := func() []string {
		entries, err := os.ReadDir(filepath.Dir(sockB))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	before := dirB()
	if err := os.Rename(sockA, sockA+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sockB, sockA); err != nil {
		t.Fatal(err)
	}

	// A provider of its own dials anew: no connection made before the
	// swap is reused.
	a2, err := s.open(t).Get(t.Context(), a.ID())
	if err != nil {
		t.Fatalf("Get(%s): %v", a.ID(), err)
	}
	typed := func(op string, err error) {
		t.Helper()
		if err != nil && errdefs.KindOf(err) == errdefs.Internal {
			t.Errorf("%s on the sandbox whose socket is a link: %v, want success or a typed error", op, err)
		}
	}
	r, err := execute(t, a2, provider.ExecRequest{Argv: []string{"/bin/sh", "-c", "cat who; echo x > pwned"}})
	if err == nil && strings.TrimSpace(r.stdout) != "a" {
		t.Errorf("exec on sandbox a ran in another sandbox: it printed %q", r.stdout)
	} else if err != nil {
		typed("Exec", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), opTimeout)
	defer cancel()
	typed("WriteFile", a2.WriteFile(ctx, "written", strings.NewReader("x"), 0))
	if rc, err := a2.ReadFile(ctx, "who"); err == nil {
		got, _ := io.ReadAll(rc)
		rc.Close()
		if strings.TrimSpace(string(got)) != "a" {
			t.Errorf("ReadFile on sandbox a read another sandbox's file: %q", got)
		}
	} else {
		typed("ReadFile", err)
	}
	if out := mustSh(t, b, "ls"); strings.TrimSpace(out) != "who" {
		t.Errorf("the other sandbox's workspace holds %q after the swap", out)
	}
	if after := dirB(); !slices.Equal(after, before) {
		t.Errorf("the other sandbox's socket directory held %v, now %v", before, after)
	}
}
