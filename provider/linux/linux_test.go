package linux

import (
	"github.com/berth-dev/berth/internal/randid"

	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

func create(t *testing.T, p *Provider, spec provider.Spec) *sandbox {
	t.Helper()
	return sandboxtest.Create(t, p, spec).(*sandbox)
}

var sh = sandboxtest.Sh

// TestLost kills a sandbox's daemon from outside, as an OOM killer or an
// operator would: operations report it lost, Info says so, and Destroy
// still cleans everything up.
func TestLost(t *testing.T) {
	p := newTestProvider(t)
	sb := create(t, p, provider.Spec{ID: "lost"})
	sh(t, sb, "echo hi > f")
	if err := unix.Kill(sb.rec.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "daemon gone", 5*time.Second, func() bool { return !sb.rec.alive() })

	_, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("exec on a lost sandbox: %v, want ErrLost", err)
	}
	if _, err := sb.ReadFile(t.Context(), "f"); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("read on a lost sandbox: %v, want ErrLost", err)
	}
	info, err := sb.Info(t.Context())
	if err != nil || info.State != provider.StateLost {
		t.Errorf("Info = %+v, %v; want state lost", info, err)
	}
	infos, err := p.List(t.Context(), nil)
	if err != nil || len(infos) != 1 || infos[0].State != provider.StateLost {
		t.Errorf("List = %+v, %v; want the lost sandbox", infos, err)
	}
	checkDestroyLeavesNothing(t, p, sb)
}

// checkDestroyLeavesNothing destroys sb and checks that no process,
// cgroup or file of it remains.
func checkDestroyLeavesNothing(t *testing.T, p *Provider, sb *sandbox) {
	t.Helper()
	cg, err := loadCgroup(sb.rec.Cgroup)
	if err != nil {
		t.Fatalf("cgroups before destroy: %v", err)
	}
	pids, _ := cg.pids()
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(t.Context(), sb.ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get right after destroy: %v, want ErrNotFound", err)
	}
	p.cleanups.Wait() // cgroups and files go in the background
	for _, pid := range append(pids, sb.rec.PID) {
		if err := unix.Kill(pid, 0); err == nil {
			if start, err := hostproc.Start(pid); err == nil && (pid != sb.rec.PID || start == sb.rec.PIDStart) {
				t.Errorf("process %d of the sandbox survived", pid)
			}
		}
	}
	for name, path := range sb.rec.Cgroup.V1 {
		if _, err := os.Stat(filepath.Join(cgroupRoot, string(name), path)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s:%s survived (%v)", name, path, err)
		}
	}
	if sb.rec.Cgroup.V2 != "" {
		if _, err := os.Stat(filepath.Join(cgroupRoot, sb.rec.Cgroup.V2)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s survived", sb.rec.Cgroup.V2)
		}
	}
	for _, d := range []string{p.cfg.StateDir, filepath.Join(p.cfg.StateDir, trashDir)} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), sb.ID()) {
				t.Errorf("state %s survived", filepath.Join(d, e.Name()))
			}
		}
	}
	if _, err := p.Get(t.Context(), sb.ID()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after destroy: %v, want ErrNotFound", err)
	}
}

// TestDestroyLeavesNothing runs busy processes, including ones that left
// the command's session, and a paused sandbox, then destroys.
func TestDestroyLeavesNothing(t *testing.T) {
	p := newTestProvider(t)
	for _, pause := range []bool{false, true} {
		sb := create(t, p, provider.Spec{})
		sh(t, sb, "sleep 100 >/dev/null 2>&1 & setsid sleep 100 >/dev/null 2>&1 & dd if=/dev/zero of=/tmp/x bs=1M count=8 2>/dev/null; echo ok")
		if pause {
			if err := sb.Pause(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		checkDestroyLeavesNothing(t, p, sb)
	}
}

// TestOutlivesCreator creates a sandbox from another process that then
// exits; this process finds it by id, uses it, and destroys it.
func TestOutlivesCreator(t *testing.T) {
	if dir := os.Getenv("BERTH_TEST_CREATOR_DIR"); dir != "" {
		p, err := New(Config{StateDir: dir, Pool: -1})
		if err != nil {
			t.Fatal(err)
		}
		sb, err := p.Create(t.Context(), provider.Spec{ID: "orphan", Labels: map[string]string{"owner": "gone"}})
		if err != nil {
			t.Fatal(err)
		}
		sh(t, sb, "echo from-creator > note; nohup sleep 1000 >/dev/null 2>&1 &")
		return
	}
	p := newTestProvider(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestOutlivesCreator$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BERTH_TEST_CREATOR_DIR="+p.cfg.StateDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("creator: %v\n%s", err, out)
	}
	infos, err := p.List(t.Context(), map[string]string{"owner": "gone"})
	if err != nil || len(infos) != 1 || infos[0].State != provider.StateRunning {
		t.Fatalf("List = %+v, %v; want the running sandbox", infos, err)
	}
	got, err := p.Get(t.Context(), "orphan")
	if err != nil {
		t.Fatal(err)
	}
	sb := got.(*sandbox)
	if out := sh(t, sb, "cat note; pgrep -c sleep || ls /proc | grep -c '^[0-9]'"); !strings.HasPrefix(out, "from-creator\n") {
		t.Errorf("after reconnecting: %q", out)
	}
	checkDestroyLeavesNothing(t, p, sb)
}

// TestLifetime: a sandbox past its hard lifetime is stopped whatever it
// is doing.
func TestLifetime(t *testing.T) {
	p := newTestProvider(t)
	sb := create(t, p, provider.Spec{Lifetime: 500 * time.Millisecond})
	info, err := sb.Info(t.Context())
	if err != nil || info.ExpiresAt.Sub(info.CreatedAt) != 500*time.Millisecond {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	_, err = sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"sleep", "30"}})
	if !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("a command outliving the sandbox: %v, want ErrLost", err)
	}
	testkit.Eventually(t, "sandbox stopped", 5*time.Second, func() bool {
		info, err := sb.Info(t.Context())
		return err == nil && info.State == provider.StateLost
	})
}

// TestIdleDaemonMemory: an idle sandbox's daemon stays small. What one
// more sandbox costs is its daemon's unique memory (USS) while another
// daemon runs too: the pages of the binary are page cache, shared by
// every process that maps the binary, and count once.
func TestIdleDaemonMemory(t *testing.T) {
	p := newTestProvider(t)
	create(t, p, provider.Spec{})
	sb := create(t, p, provider.Spec{})
	sh(t, sb, "true")
	b, err := os.ReadFile("/proc/" + strconv.Itoa(sb.rec.PID) + "/smaps_rollup")
	if err != nil {
		t.Fatal(err)
	}
	var uss int64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 3 && (f[0] == "Private_Clean:" || f[0] == "Private_Dirty:") {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			uss += kb << 10
		}
	}
	t.Logf("idle daemon: USS %.1f MiB, RSS %.1f MiB", float64(uss)/(1<<20), float64(daemonRSS(t, sb))/(1<<20))
	if uss > 10<<20 {
		t.Errorf("idle daemon USS %d bytes, want at most 10 MiB", uss)
	}
}

// TestHostIsolation checks what the sandbox must not see of the host.
func TestHostIsolation(t *testing.T) {
	p := newTestProvider(t)
	sb := create(t, p, provider.Spec{})
	tests := []struct{ name, script, want string }{
		{"no host processes", "ls /proc | grep -c '^[0-9]*$'", ""},
		{"only loopback", "ls /sys/class/net 2>/dev/null || cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", "lo\n"},
		{"no capabilities", "grep CapEff /proc/self/status", "CapEff:\t0000000000000000\n"},
		{"no new privileges", "grep NoNewPrivs /proc/self/status", "NoNewPrivs:\t1\n"},
		{"seccomp on", "grep '^Seccomp:' /proc/self/status", "Seccomp:\t2\n"},
		{"root read-only", "touch /x 2>&1 >/dev/null | grep -c Read-only", "1\n"},
		{"usr read-only", "touch /usr/x 2>&1 >/dev/null | grep -c -e Read-only -e denied", "1\n"},
		{"no user namespaces", "unshare -U true 2>&1 | grep -c 'not permitted'", "1\n"},
		{"threads (clone3 falls back)", "/usr/bin/python3 -c 'import threading as t; x=t.Thread(target=print, args=(1,)); x.start(); x.join()'", "1\n"},
		{"no mounts", "mount -t tmpfs t /tmp 2>&1 | grep -c -e 'not permitted' -e 'must be superuser'", "1\n"},
		{"hostname", "hostname", "sandbox\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sh(t, sb, tt.script)
			if tt.want != "" && got != tt.want {
				t.Errorf("%q = %q, want %q", tt.script, got, tt.want)
			}
		})
	}
	// Few processes: the daemon, the shell, ls, grep.
	if n := strings.TrimSpace(sh(t, sb, "ls /proc | grep -c '^[0-9]*$'")); len(n) > 1 {
		t.Errorf("the sandbox sees %s processes", n)
	}
}

// TestRootFS runs a sandbox on a root filesystem of its own: a /bin/sh
// and the libraries it needs, and nothing of the host's.
func TestRootFS(t *testing.T) {
	p := newTestProvider(t)
	root, err := os.MkdirTemp("", "rootfs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ldd", sh).Output()
	if err != nil {
		t.Fatal(err)
	}
	files := []string{sh}
	for line := range strings.Lines(string(out)) {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	for _, f := range files {
		dst := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-L", f, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v %s", f, err, out)
		}
	}
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	if err := os.Symlink(sh, filepath.Join(root, "bin", "sh")); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "marker"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := create(t, p, provider.Spec{RootFS: root})
	var stdout bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{
		Argv:   []string{"/bin/sh", "-c", "read m < /marker; echo $m; test -e /usr/bin/apt && echo host; echo x > /workspace/f && echo ok"},
		Stdout: &stdout,
	})
	if err != nil || res.ExitCode != 0 || stdout.String() != "mine\nok\n" {
		t.Errorf("in its own root: %q, exit %d, %v; want the marker and no host /usr", stdout.String(), res.ExitCode, err)
	}
	if _, err := p.Create(t.Context(), provider.Spec{RootFS: "relative/dir"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("relative root filesystem: %v, want bad input", err)
	}
}

// TestDedicatedDaemon runs sandboxes on the berth-sandboxd binary, as an
// installed berth does, rather than on the test binary.
func TestDedicatedDaemon(t *testing.T) {
	bin := buildDaemon(t)
	p, err := New(Config{StateDir: shortTempDir(t), DaemonPath: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	sb := create(t, p, provider.Spec{})
	if out := sh(t, sb, "echo $USER in $PWD"); out != "sandbox in /workspace\n" {
		t.Errorf("through %s: %q", DaemonName, out)
	}
	// An idle sandbox costs mostly its daemon: docs/performance.md
	// quotes these figures.
	mem := sandboxtest.SmapsRollup(t, sb.rec.PID)
	t.Logf("idle %s: Rss %d KiB, Pss %d KiB, Private_Dirty %d KiB, Anonymous %d KiB", DaemonName,
		mem["Rss"], mem["Pss"], mem["Private_Dirty"], mem["Anonymous"])
	// Anonymous is its own; the rest is the binary's pages, shared by
	// every daemon (and dirty in the page cache, just built).
	if mem["Anonymous"] > 6<<10 {
		t.Errorf("idle %s holds %d KiB of anonymous memory, want at most 6 MiB", DaemonName, mem["Anonymous"])
	}
	// Run by hand with no subcommand, it refuses, and says how it runs.
	if out, err := exec.Command(bin).CombinedOutput(); err == nil || !strings.Contains(string(out), "is started by berth's") {
		t.Errorf("%s run by hand: %v, %q; want a refusal", DaemonName, err, out)
	}
}

// TestLongStateDir: sockets are reached however long the state
// directory's path, beyond what a unix socket address holds.
func TestLongStateDir(t *testing.T) {
	dir := filepath.Join(shortTempDir(t), strings.Repeat("d", 100), strings.Repeat("e", 40))
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	for d := dir; d != filepath.Dir(dir); d = filepath.Dir(d) {
		os.Chmod(d, 0o711)
		if len(d) < 20 {
			break
		}
	}
	p, err := New(Config{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	sb := create(t, p, provider.Spec{ID: strings.Repeat("x", provider.MaxIDLen)})
	if out := sh(t, sb, "echo ok"); out != "ok\n" {
		t.Errorf("got %q", out)
	}
	q, err := New(Config{StateDir: dir, Pool: -1})
	if err != nil {
		t.Fatal(err)
	}
	again, err := q.Get(t.Context(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if out := sh(t, again, "echo again"); out != "again\n" {
		t.Errorf("reconnected: got %q", out)
	}
}

// TestNoInheritedDescriptors: a descriptor the creating process holds
// without close-on-exec does not reach the sandbox's daemon, which still
// works: the test binary and berth-sandboxd open different descriptors
// of their own before the daemon starts, and none may be lost.
func TestNoInheritedDescriptors(t *testing.T) {
	t.Run("test binary", func(t *testing.T) { checkNoInherited(t, newTestProvider(t)) })
	t.Run(DaemonName, func(t *testing.T) {
		p, err := New(Config{StateDir: shortTempDir(t), DaemonPath: buildDaemon(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { destroyAll(t, p) })
		checkNoInherited(t, p)
	})
}

func checkNoInherited(t *testing.T, p *Provider) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETFD, 0); err != nil { // no close-on-exec
		t.Fatal(err)
	}
	sb := create(t, p, provider.Spec{})
	for i := range 20 {
		if out := sh(t, sb, "echo "+strconv.Itoa(i)); out != strconv.Itoa(i)+"\n" {
			t.Fatalf("command %d: %q", i, out)
		}
	}
	fds, err := os.ReadDir("/proc/" + strconv.Itoa(sb.rec.PID) + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	var pipeIno uint64
	var st unix.Stat_t
	if err := unix.Fstat(int(w.Fd()), &st); err == nil {
		pipeIno = st.Ino
	}
	for _, fd := range fds {
		target, _ := os.Readlink("/proc/" + strconv.Itoa(sb.rec.PID) + "/fd/" + fd.Name())
		if target == fmt.Sprintf("pipe:[%d]", pipeIno) {
			t.Errorf("the daemon holds the host's pipe as fd %s", fd.Name())
		}
	}
}

// TestStaleCgroupsSwept: empty sandbox cgroups left by daemons nobody
// looked after are removed; those of live sandboxes are not.
func TestStaleCgroupsSwept(t *testing.T) {
	p := newTestProvider(t)
	sb, err := p.Create(t.Context(), provider.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	live := sb.(*sandbox).rec.Cgroup
	stale, err := pathsFor("stale-" + randid.Hex(4))
	if err != nil {
		t.Fatal(err)
	}
	cg, err := newCgroup(stale, provider.Resources{Memory: 128 << 20, Pids: 64}, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.destroy(t.Context())
	sweepStaleCgroups(t.Context(), p.log, 200*time.Millisecond)
	if _, err := loadCgroup(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the empty cgroup is still there (%v)", err)
	}
	if _, err := loadCgroup(live); err != nil {
		t.Errorf("the live sandbox's cgroup: %v", err)
	}
	if res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
		t.Errorf("the live sandbox after the sweep: %+v, %v", res, err)
	}
}

// nsGetOwnerUID is NS_GET_OWNER_UID (linux/nsfs.h).
const nsGetOwnerUID = 0xb704

// namespaceOwner reads the host uid owning the user namespace of pid.
func namespaceOwner(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var uid uint32
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nsGetOwnerUID, uintptr(unsafe.Pointer(&uid))); e != 0 {
		t.Fatalf("NS_GET_OWNER_UID: %v", e)
	}
	return int(uid)
}

// TestUserNamespaceOwners: each sandbox's user namespace is owned by a
// host uid of its own, outside the ids the sandboxes' users map to, so
// that the kernel charges its per-user counters to neither the host's
// root nor another sandbox; and its daemon, the namespace's root, runs
// as that uid, so that no two sandboxes' daemons share a host uid
// (whoever had one's could signal them all). Sandboxes from two
// providers on one state directory, warm and cold, all differ; an owner
// is free again once its sandbox is gone.
func TestUserNamespaceOwners(t *testing.T) {
	dir := shortTempDir(t)
	var sbs []*sandbox
	for i, pool := range []int{2, -1} {
		p, err := New(Config{StateDir: dir, Pool: pool})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { destroyAll(t, p) })
		for j := range 3 {
			sbs = append(sbs, create(t, p, provider.Spec{ID: fmt.Sprintf("owned-%d-%d", i, j)}))
		}
	}
	base := 100000
	seen := map[int]string{}
	for _, sb := range sbs {
		owner := namespaceOwner(t, sb.rec.PID)
		t.Logf("%s: user namespace owned by host uid %d", sb.rec.ID, owner)
		if owner < base+idRange || owner >= base+2*idRange {
			t.Errorf("%s: user namespace owned by host uid %d, want one in [%d, %d)", sb.rec.ID, owner, base+idRange, base+2*idRange)
		}
		if other, ok := seen[owner]; ok {
			t.Errorf("%s and %s share the owner uid %d", other, sb.rec.ID, owner)
		}
		seen[owner] = sb.rec.ID
		if uid := daemonUID(t, sb.rec.PID); uid != owner {
			t.Errorf("%s: the daemon runs as host uid %d, want its own, %d", sb.rec.ID, uid, owner)
		}
	}
}

// TestOwnerReleased: the uid owning a sandbox's namespace is taken while
// its daemon lives, and free once it is gone; the thread that took it to
// create the daemon is gone too.
func TestOwnerReleased(t *testing.T) {
	p, err := New(Config{StateDir: shortTempDir(t), Pool: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	sb := create(t, p, provider.Spec{})
	owner := namespaceOwner(t, sb.rec.PID)
	f, err := os.OpenFile(filepath.Join(p.cfg.StateDir, ownersFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: int64(owner - p.cfg.UIDBase - idRange), Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err == nil {
		t.Fatalf("the owner uid %d of a live sandbox is free", owner)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Errorf("the owner uid %d of a destroyed sandbox is still taken: %v", owner, err)
	}
	// The thread ends just after the daemon starts.
	testkit.Eventually(t, "every thread of the test process is host root", 2*time.Second, func() bool {
		tasks, _ := os.ReadDir("/proc/self/task")
		for _, task := range tasks {
			b, _ := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
			for line := range strings.SplitSeq(string(b), "\n") {
				if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" && f[1]+f[2]+f[3]+f[4] != "0000" {
					t.Logf("thread %s: %s", task.Name(), line)
					return false
				}
			}
		}
		return true
	})
}

// TestMemoryReserve: commands cannot take the daemon's reserve. With a
// reserve of 32 MiB in a sandbox of 128 MiB, a command of 80 MiB runs,
// one of 100 MiB, which the sandbox's limit alone would let be, is
// killed and reported out of memory; the daemon serves on.
func TestMemoryReserve(t *testing.T) {
	p, err := New(Config{StateDir: shortTempDir(t), Limits: KernelLimits{MemoryReserve: 32 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	sb := create(t, p, provider.Spec{Resources: provider.Resources{Memory: 128 << 20}})
	alloc := func(mib int) (provider.ExecResult, error) {
		return sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"python3", "-c", fmt.Sprintf(`
b = bytearray(%d << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
`, mib)}})
	}
	if res, err := alloc(80); err != nil || res.ExitCode != 0 {
		t.Errorf("80 MiB: exit code %d, %v; want it to run", res.ExitCode, err)
	}
	res, err := alloc(100)
	if !errors.Is(err, errdefs.ErrOutOfMemory) || !res.OOMKilled {
		t.Errorf("100 MiB: exit code %d, signal %q, OOMKilled %v, %v; want ErrOutOfMemory", res.ExitCode, res.Signal, res.OOMKilled, err)
	}
	if out := sh(t, sb, "echo ok"); out != "ok\n" {
		t.Errorf("echo ok after: %q", out)
	}
}

// daemonUID is the host uid a daemon runs as (real, effective, saved and
// file system ids all), or -1 if they differ.
func daemonUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
			if f[1] != f[2] || f[1] != f[3] || f[1] != f[4] {
				return -1
			}
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}

// TestClaimBeforeFirstCommand: Create does not wait for the daemon to
// apply its claim, so the first command, sent at once, must still find
// the sandbox's environment and process limit in place.
func TestClaimBeforeFirstCommand(t *testing.T) {
	p := newTestProvider(t)
	ctx := t.Context()
	for i := range 3 {
		spec := provider.Spec{Env: map[string]string{"CLAIMED": strconv.Itoa(i)}, Resources: provider.Resources{Pids: 300}}
		sb, err := p.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		res, err := sb.Exec(ctx, provider.ExecRequest{Shell: `echo "$CLAIMED $(sed -n 's/^Max processes *\([0-9]*\).*/\1/p' /proc/self/limits)"`, Stdout: &out})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %+v, %v", res, err)
		}
		want := fmt.Sprintf("%d %d\n", i, p.cfg.Limits.userProcesses(300))
		if out.String() != want {
			t.Errorf("first command saw %q, want %q", out.String(), want)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
