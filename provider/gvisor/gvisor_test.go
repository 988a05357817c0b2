package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

func create(t *testing.T, p *Provider, spec provider.Spec) *sandbox {
	t.Helper()
	return sandboxtest.Create(t, p, spec).(*sandbox)
}

var sh = sandboxtest.Sh

// TestSmoke: a command runs on gVisor's kernel, not the host's, as the
// sandbox's user, in the workspace, with the open files limit of
// Config.OpenFiles, and a file it writes stays.
func TestSmoke(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1, OpenFiles: 512})
	sb := create(t, p, provider.Spec{ID: "smoke"})
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(sh(t, sb, "uname -r; id -u; id -g; pwd; ulimit -n; echo hi > f; cat f"))
	want := []string{"", strconv.Itoa(sandboxUID), strconv.Itoa(sandboxGID), provider.Workspace, "512", "hi"}
	if len(got) != len(want) {
		t.Fatalf("the smoke command printed %q, want kernel release, uid, gid, directory, open files, hi", got)
	}
	if release := unix.ByteSliceToString(host.Release[:]); got[0] == release {
		t.Errorf("the sandbox's kernel release is the host's, %s: the command did not run on gVisor", release)
	}
	for i, what := range []string{"", "uid", "gid", "working directory", "open files limit", "a file written then read"} {
		if i > 0 && got[i] != want[i] {
			t.Errorf("%s: %q, want %q", what, got[i], want[i])
		}
	}
}

// TestLost kills runsc's sandbox process from outside, as the
// out-of-memory killer or an operator would: operations report the
// sandbox lost, promptly, Info and List say so, and Destroy still
// removes everything.
func TestLost(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	sb := create(t, p, provider.Spec{ID: "lost", Labels: map[string]string{"k": "lost"}})
	sh(t, sb, "echo hi > f")
	if err := unix.Kill(sb.rec.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "sandbox process gone", 5*time.Second, func() bool { return !sb.rec.alive() })

	start := time.Now()
	if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("exec on a lost sandbox: %v, want ErrLost", err)
	}
	if _, err := sb.ReadFile(t.Context(), "f"); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("read on a lost sandbox: %v, want ErrLost", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("operations on a lost sandbox took %v", d)
	}
	if info, err := sb.Info(t.Context()); err != nil || info.State != provider.StateLost {
		t.Errorf("Info = %+v, %v; want state lost", info, err)
	}
	if infos, err := p.List(t.Context(), map[string]string{"k": "lost"}); err != nil || len(infos) != 1 || infos[0].State != provider.StateLost {
		t.Errorf("List = %+v, %v; want the lost sandbox", infos, err)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatalf("Destroy of a lost sandbox: %v", err)
	}
	p.cleanups.Wait()
	checkGone(t, p, sb.rec)
}

// TestDestroyLeavesNothing destroys a sandbox, a running one and a paused
// one, and looks for what it held: processes, mounts, loop devices,
// cgroups, runsc's state, files.
func TestDestroyLeavesNothing(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	for _, pause := range []bool{false, true} {
		sb := create(t, p, provider.Spec{ID: "gone" + strconv.FormatBool(pause)})
		sh(t, sb, "echo x > f; (sleep 1000 &) ; sleep 1000 > /dev/null 2>&1 &")
		if pause {
			if err := sb.Pause(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		if !hasMount(t, sb.rec.Container) || !hasLoop(t, sb.rec.Container) || !hasProcess(t, sb.rec.Container) {
			t.Fatalf("the sandbox's mount, loop device or processes were not found before Destroy: the checks below would prove nothing")
		}
		if err := sb.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		if sb.rec.alive() {
			t.Errorf("runsc's sandbox process, which runs every process of the sandbox, outlived Destroy")
		}
		p.cleanups.Wait() // runsc's cleanup, the mount and the files follow
		checkGone(t, p, sb.rec)
		if err := sb.Destroy(t.Context()); err != nil {
			t.Errorf("second Destroy: %v", err)
		}
		if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("exec after Destroy: %v, want ErrNotFound", err)
		}
	}
}

// checkGone fails the test for anything of rec's sandbox left on the host.
func checkGone(t *testing.T, p *Provider, rec *record) {
	t.Helper()
	cid := rec.Container
	if hasProcess(t, cid) {
		t.Errorf("a process of container %s is left", cid)
	}
	if hasMount(t, cid) {
		t.Errorf("a mount of container %s is left", cid)
	}
	if hasLoop(t, cid) {
		t.Errorf("a loop device of container %s is left", cid)
	}
	for _, path := range []string{p.containerDir(cid), p.recordPath(rec.ID),
		filepath.Join("/sys/fs/cgroup/memory", cgroupPath(cid)), filepath.Join("/sys/fs/cgroup/pids", cgroupPath(cid))} {
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is left (%v)", path, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, runscDir))
	for _, e := range entries {
		if strings.Contains(e.Name(), cid) {
			t.Errorf("runsc's state %s is left", e.Name())
		}
	}
}

// hasProcess reports whether a process of the host names container cid
// in its command line (runsc's sandbox and gofer processes do).
func hasProcess(t *testing.T, cid string) bool {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.Contains(b, []byte(cid)) {
			return true
		}
	}
	return false
}

func hasMount(t *testing.T, cid string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(b, []byte(cid))
}

func hasLoop(t *testing.T, cid string) bool {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(cid)) {
			return true
		}
	}
	return false
}

// TestOtherProcess finds a sandbox from another process on the host, on
// the same state directory, and runs a command in it, paused state and
// all.
func TestOtherProcess(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	sb := create(t, p, provider.Spec{ID: "shared", Labels: map[string]string{"owner": "x"}})
	sh(t, sb, "echo hello from the sandbox > hello")
	child := func(op string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+p.cfg.StateDir+":"+op)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := child("cat"); err != nil || out != "hello from the sandbox\n" {
		t.Fatalf("another process: %q, %v", out, err)
	}
	if out, err := child("pause"); err != nil {
		t.Fatalf("pause from another process: %q, %v", out, err)
	}
	if info, err := sb.Info(t.Context()); err != nil || info.State != provider.StatePaused {
		t.Errorf("Info after another process paused it = %+v, %v; want paused", info, err)
	}
	if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxPaused) {
		t.Errorf("exec on a sandbox another process paused: %v, want ErrPaused", err)
	}
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, err := child("cat"); err != nil || out != "hello from the sandbox\n" {
		t.Fatalf("another process after resume: %q, %v", out, err)
	}
	if out, err := child("destroy"); err != nil {
		t.Fatalf("destroy from another process: %q, %v", out, err)
	}
	checkGone(t, p, sb.rec)
}

// childEnv, set to STATEDIR:OP, makes the test binary another process on
// the host: it opens the provider on STATEDIR, finds the sandbox
// "shared", and does OP to it (see child).
const childEnv = "BERTH_GVISOR_TEST_CHILD"

func child(arg string) int {
	dir, op, _ := strings.Cut(arg, ":")
	ctx := context.Background()
	p, err := provider.Open(ctx, Name, provider.Config{"state-dir": dir, "pool": "-1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p.(io.Closer).Close()
	infos, err := p.List(ctx, map[string]string{"owner": "x"})
	if err != nil || len(infos) != 1 || infos[0].ID != "shared" {
		fmt.Fprintf(os.Stderr, "List: %+v, %v\n", infos, err)
		return 1
	}
	sb, err := p.Get(ctx, "shared")
	if err == nil {
		switch op {
		case "cat":
			_, err = sb.Exec(ctx, provider.ExecRequest{Argv: []string{"cat", "hello"}, Stdout: os.Stdout})
		case "pause":
			err = sb.(provider.Pauser).Pause(ctx)
		case "destroy":
			err = sb.Destroy(ctx)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not so after %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConfig(t *testing.T) {
	for _, pc := range []provider.Config{
		{"state-dir": "/x", "bogus": "1"},
		{"memory": "lots"},
		{"pool": "2.5"},
	} {
		if _, err := fromProviderConfig(pc); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("%v: %v, want ErrBadInput", pc, err)
		}
	}
	c, err := fromProviderConfig(provider.Config{"state-dir": "/s", "runsc": "/r", "platform": "kvm", "pool": "-1", "memory": "1024", "disk": "16777216"})
	if err != nil || c.StateDir != "/s" || c.Runsc != "/r" || c.Platform != "kvm" || c.Pool != -1 || c.Defaults.Memory != 1024 || c.Defaults.Disk != 16<<20 {
		t.Errorf("decoded %+v, %v", c, err)
	}
	if _, err := provider.Open(t.Context(), Name, provider.Config{"runsc": "/nonexistent/runsc"}); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("a missing runsc: %v, want ErrUnsupported", err)
	}
}

// TestSweep: a provider opened on a state directory removes the warm
// containers a dead process left, and not those of a live one.
func TestSweep(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	c, err := p.startContainer(t.Context(), "", p.cfg.Defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.teardown(context.Background(), c.id) })
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(c.dir, old, old); err != nil {
		t.Fatal(err)
	}
	q := newTestProvider(t, Config{StateDir: p.cfg.StateDir, Pool: -1})
	if _, err := os.Stat(c.dir); err != nil || !hasProcess(t, c.id) {
		t.Fatalf("a live process's warm container was swept: %v", err)
	}
	c.release() // as if its process died
	q.sweep(t.Context())
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) || hasProcess(t, c.id) || hasMount(t, c.id) {
		t.Errorf("a dead process's warm container was not swept: %v", err)
	}
}

// TestTeardownForgottenContainer tears down a started container whose
// runsc state is gone, as after a runsc run killed half-way (its
// deadline passed on a loaded host): its sandbox and gofer processes
// still run, and teardown must end them and leave nothing.
func TestTeardownForgottenContainer(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	c, err := p.startContainer(t.Context(), "", p.cfg.Defaults, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.release()
	states, _ := filepath.Glob(filepath.Join(p.cfg.StateDir, runscDir, "*"+c.id+"*"))
	if len(states) == 0 {
		t.Fatalf("no runsc state of container %s found to remove: the test would prove nothing", c.id)
	}
	for _, s := range states {
		if err := os.RemoveAll(s); err != nil {
			t.Fatal(err)
		}
	}
	if !hasProcess(t, c.id) {
		t.Fatalf("container %s has no process before teardown: the test would prove nothing", c.id)
	}
	if err := p.teardown(t.Context(), c.id); err != nil {
		t.Errorf("teardown of a container runsc forgot: %v", err)
	}
	checkGone(t, p, &record{Container: c.id})
}
