package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

func create(t *testing.T, p *Provider, spec provider.Spec) *sandbox {
	t.Helper()
	return sandboxtest.Create(t, p, spec).(*sandbox)
}

var sh = sandboxtest.Sh

// containers lists the containers of a state directory, warm ones too.
func containers(t *testing.T, p *Provider) []string {
	t.Helper()
	list, err := p.docker.ContainerList(t.Context(), client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", LabelStateDir+"="+p.cfg.StateDir)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

func TestOpenBadConfig(t *testing.T) {
	needDocker(t)
	for _, cfg := range []provider.Config{
		{"no-such-setting": "1"},
		{"pool": "many"},
		{"daemon": "/nonexistent/berth-sandboxd"},
		{"daemon": "/bin/true"}, // dynamically linked
		{"daemon": "/etc/passwd"},
		{"daemon": testEnv.daemon, "memory": "1000"},
	} {
		_, err := provider.Open(t.Context(), Name, cfg)
		if !errors.Is(err, errdefs.ErrBadInput) && !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("Open(%v): %v, want bad input or unsupported", cfg, err)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("Open(%v): error of more than one line: %q", cfg, err)
		}
	}
}

func TestImageMissing(t *testing.T) {
	p := newTestProvider(t, Config{PullTimeout: time.Minute})
	_, err := p.Create(t.Context(), provider.Spec{ID: "missing", Image: "berth-no-such-image:0"})
	if !errors.Is(err, errdefs.ErrBadInput) {
		t.Fatalf("Create with an image nobody has: %v, want bad input", err)
	}
	msg := err.Error()
	for _, want := range []string{"berth-no-such-image:0", "docker pull", "docker load", "docker import"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("the error is more than one line: %q", msg)
	}
	if ids := containers(t, p); len(ids) != 0 {
		t.Errorf("a failed creation left containers: %v", ids)
	}
	for _, image := range []string{"UPPER:case", "a b", strings.Repeat("x", 5000), "x@sha256:zz"} {
		_, err := p.Create(t.Context(), provider.Spec{Image: image})
		if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 1000 {
			t.Errorf("Create with image %.20q: %.300v; want one short line of bad input", image, err)
		}
	}
	if _, err := p.Create(t.Context(), provider.Spec{Image: testImage, RootFS: "/"}); !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("Create with a root filesystem: %v, want unsupported", err)
	}
}

// TestDestroyLeavesNothing: no container, mount, loop device, slot or
// record is left after Destroy, and no warm container after Close.
func TestDestroyLeavesNothing(t *testing.T) {
	p := newTestProvider(t, Config{})
	sb := create(t, p, provider.Spec{ID: "gone", Labels: map[string]string{"owner": "me"}})
	sh(t, sb, "head -c 1000000 /dev/urandom > f")
	img := filepath.Join(p.slotPath(sb.rec.UID), imageFile)
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range containers(t, p) {
		if id == sb.rec.Container {
			t.Errorf("container %s is still there", id)
		}
	}
	slot := p.slotPath(sb.rec.UID)
	checkNoMounts(t, slot)
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range backing {
		if b, _ := os.ReadFile(f); strings.Contains(string(b), img) {
			t.Errorf("loop device %s still holds the workspace", f)
		}
	}
	for _, d := range []string{slotsDir, sandboxesDir} {
		var names []string
		entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, d))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if d == sandboxesDir && len(names) > 0 {
			t.Errorf("%s holds %v after Destroy", d, names)
		}
		if d == slotsDir && len(names) > p.cfg.Pool {
			t.Errorf("%s holds %v after Destroy, with a pool of %d", d, names, p.cfg.Pool)
		}
	}
	if _, err := p.Get(t.Context(), "gone"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after Destroy: %v, want not found", err)
	}
	// The pool's containers go with the provider.
	p.Close()
	if ids := containers(t, p); len(ids) != 0 {
		t.Errorf("containers left after Destroy and Close: %v", ids)
	}
	entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, slotsDir))
	if len(entries) != 0 {
		t.Errorf("slots left after Close: %d", len(entries))
	}
	checkNoMounts(t, p.cfg.StateDir)
}

// checkNoMounts fails the test if anything is mounted below dir.
func checkNoMounts(t *testing.T, dir string) {
	t.Helper()
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mountinfo)) {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("still mounted: %s", line)
		}
	}
}

// TestKilledFromOutside: a container killed behind the provider's back
// makes its sandbox lost, at once, and Destroy still cleans up.
func TestKilledFromOutside(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	sb := create(t, p, provider.Spec{ID: "killed"})
	sh(t, sb, "true")
	// A command running when the container dies ends too.
	done := make(chan error, 1)
	var out testkit.SyncBuffer
	go func() {
		_, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"sh", "-c", "echo running; exec sleep 1000"}, Stdout: &out})
		done <- err
	}()
	testkit.Eventually(t, "the command to run", 30*time.Second, func() bool { return out.String() == "running\n" })
	if out, err := exec.Command("docker", "kill", sb.rec.Container).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errdefs.ErrSandboxLost) {
			t.Errorf("a command running when its container was killed: %v, want lost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a command running when its container was killed did not end")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxLost) {
		t.Errorf("Exec after the container was killed: %v, want lost", err)
	}
	if info, err := sb.Info(ctx); err != nil || info.State != provider.StateLost {
		t.Errorf("Info after the container was killed: %q, %v; want lost", info.State, err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("Destroy of a lost sandbox: %v", err)
	}
	if ids := containers(t, p); len(ids) != 0 {
		t.Errorf("containers left: %v", ids)
	}
}

// TestLifetime: a sandbox past its lifetime is stopped, and lost.
func TestLifetime(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	const lifetime = time.Second
	created := time.Now()
	sb := create(t, p, provider.Spec{ID: "brief", Lifetime: lifetime})
	testkit.Eventually(t, "the sandbox past its lifetime of 1s to be lost", 15*time.Second, func() bool {
		info, err := sb.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State == provider.StateLost
	})
	// Not before its time: a load can only make it later.
	if lived := time.Since(created); lived < lifetime {
		t.Errorf("the sandbox was lost after %v, before its lifetime of %v", lived, lifetime)
	}
}

// TestContainer checks what Docker was asked for: native pause, the
// spec's limits, no network, and how commands run.
func TestContainer(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	spec := provider.Spec{ID: "limits", Resources: provider.Resources{CPU: 0.5, Memory: 256 << 20, Pids: 100, Disk: 64 << 20}}
	sb := create(t, p, spec)
	insp, err := p.docker.ContainerInspect(t.Context(), sb.rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := insp.Container.HostConfig
	if hc.Memory != spec.Resources.Memory || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 100 ||
		string(hc.NetworkMode) != "none" || !hc.ReadonlyRootfs {
		t.Errorf("container has memory %d, CPUs %d, pids %v, network %q, read-only root %v", hc.Memory, hc.NanoCPUs, hc.PidsLimit, hc.NetworkMode, hc.ReadonlyRootfs)
	}
	// Commands: another user, no capabilities, no_new_privs, seccomp, the
	// root read-only, the workspace's size.
	out := sh(t, sb, `grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; touch /etc/x 2>/dev/null && echo root-writable; stat -f -c 'ws %b %S' /workspace`)
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("commands run without %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "root-writable") {
		t.Error("a command could write /etc")
	}
	var blocks, bsize int64
	if i := strings.Index(out, "ws "); i < 0 {
		t.Errorf("no workspace size in %q", out)
	} else if fmt.Sscan(out[i+3:], &blocks, &bsize); blocks*bsize > spec.Resources.Disk || blocks*bsize < spec.Resources.Disk*9/10 {
		t.Errorf("the workspace holds %d bytes, want about %d", blocks*bsize, spec.Resources.Disk)
	}
	// An idle sandbox costs mostly its daemon, the container's first
	// process: docs/performance.md quotes these figures.
	mem := sandboxtest.SmapsRollup(t, insp.Container.State.Pid)
	t.Logf("idle %s: Rss %d KiB, Pss %d KiB, Anonymous %d KiB", DaemonName, mem["Rss"], mem["Pss"], mem["Anonymous"])
	// Each sandbox's user is a host uid of its own.
	other := create(t, p, provider.Spec{ID: "other"})
	if a, b := sh(t, sb, "id -u"), sh(t, other, "id -u"); a == b {
		t.Errorf("two sandboxes' users share host uid %s", a)
	}

	if err := sb.Pause(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A pause is the daemon's own stop of every other process, not
	// Docker's freezer, so that the daemon can still end the sandbox at
	// its lifetime (docs/providers/README.md): Docker sees it running.
	insp, err = p.docker.ContainerInspect(t.Context(), sb.rec.Container, client.ContainerInspectOptions{})
	if err != nil || insp.Container.State.Paused || !insp.Container.State.Running {
		t.Errorf("after Pause, Docker says paused=%v running=%v (%v)", insp.Container.State.Paused, insp.Container.State.Running, err)
	}
	if _, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrSandboxPaused) {
		t.Errorf("Exec while paused: %v, want paused", err)
	}
	if err := sb.Resume(t.Context()); err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "true")
}

// TestOtherProcess: a process that did not create a sandbox finds it by
// id and runs commands in it; so does the creator after it.
func TestOtherProcess(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	sb := create(t, p, provider.Spec{ID: "shared"})
	sh(t, sb, "echo from-the-creator > hello")
	cmd := exec.Command(os.Args[0], "-test.run=^$", "shared")
	cmd.Env = append(os.Environ(), childEnv+"="+p.cfg.StateDir, childEnv+"_DAEMON="+testEnv.daemon)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("another process: %v: %s", err, stderr)
	}
	if string(out) != "from-the-creator\n" {
		t.Errorf("another process read %q", out)
	}
	sh(t, sb, "true")
}

// firstWarm waits for the pool's first warm container and returns it.
func firstWarm(t *testing.T, p *Provider) *warm {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		p.pool.mu.Lock()
		var w *warm
		if len(p.pool.ready) > 0 {
			w = p.pool.ready[0]
		}
		p.pool.mu.Unlock()
		if w != nil {
			return w
		}
		if time.Now().After(deadline) {
			t.Fatal("the pool has no warm container after a minute")
		}
	}
}

// TestWarmContainerDied: a warm container killed while it waits in the
// pool does not fail the creation that takes it.
func TestWarmContainerDied(t *testing.T) {
	p := newTestProvider(t, Config{Pool: 1})
	create(t, p, provider.Spec{ID: "first"})
	w := firstWarm(t, p)
	if out, err := exec.Command("docker", "kill", w.container).CombinedOutput(); err != nil {
		t.Fatalf("docker kill: %v: %s", err, out)
	}
	sb := create(t, p, provider.Spec{ID: "second"})
	if sb.rec.Container == w.container {
		t.Fatal("the sandbox took the dead container")
	}
	sh(t, sb, "true")
}

// TestNetwork: loopback alone by default; Docker's bridge when asked
// without Config.Network, which then refuses allow lists.
func TestNetwork(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	if out := sh(t, create(t, p, provider.Spec{ID: "closed"}), "ls /sys/class/net"); strings.Fields(out)[0] != "lo" || len(strings.Fields(out)) != 1 {
		t.Errorf("a sandbox with no network has interfaces %q, want lo alone", out)
	}
	if out := sh(t, create(t, p, provider.Spec{ID: "open", Network: provider.Network{Mode: provider.NetworkOpen}}), "ls /sys/class/net"); !strings.Contains(out, "eth0") {
		t.Errorf("a sandbox with an open network has interfaces %q, want eth0 among them", out)
	}
	_, err := p.Create(t.Context(), provider.Spec{ID: "allow", Network: provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}})
	if !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("an allow list without Config.Network: %v, want unsupported", err)
	}
}

// TestSweep: a provider opened after a creator died removes the warm
// containers it kept and the slots it reserved, and nothing of a
// sandbox's.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	p := newTestProvider(t, Config{StateDir: dir, Pool: -1})
	sb := create(t, p, provider.Spec{ID: "kept"})
	// A warm container of a process that is gone, and an old slot that
	// nothing names.
	w, err := p.startWarm(t.Context(), testImage, p.resources(provider.Resources{}), false)
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	// Docker's labels are fixed: a warm container of the dead process
	// is made by hand, with a slot of its own.
	orphanUID, err := p.reserveSlot()
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.containerConfig(testImage, orphanUID)
	cfg.Labels[LabelOwner] = fmt.Sprint(dead.Process.Pid)
	orphan, err := p.docker.ContainerCreate(t.Context(), client.ContainerCreateOptions{Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	uid, err := p.reserveSlot()
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p.slotPath(uid), old, old); err != nil {
		t.Fatal(err)
	}
	q := newTestProvider(t, Config{StateDir: dir, Pool: -1})
	have := map[string]bool{}
	for _, id := range containers(t, q) {
		have[id] = true
	}
	if have[orphan.ID] || !have[w.container] || !have[sb.rec.Container] {
		t.Errorf("after the sweep: orphan there %v (want false), warm of a live process %v, sandbox's %v (want true)", have[orphan.ID], have[w.container], have[sb.rec.Container])
	}
	for _, u := range []int{uid, orphanUID} {
		if _, err := os.Stat(p.slotPath(u)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("slot %d, which only the dead process used, is still there: %v", u, err)
		}
	}
	for _, u := range []int{w.uid, sb.rec.UID} {
		if _, err := os.Stat(p.slotPath(u)); err != nil {
			t.Errorf("slot %d, in use, was swept: %v", u, err)
		}
	}
	sh(t, sb, "true")
	p.removeSlot(context.Background(), w.container, w.uid)
}

// TestImageVolumes: an image's VOLUME is no Docker volume, which would
// be host disk bounded by nothing, but a bounded tmpfs, which commands
// cannot write (Landlock); and Destroy leaves no volume.
func TestImageVolumes(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	const image = "berth-test-volume:1"
	if _, err := p.docker.ImageInspect(t.Context(), image); err != nil {
		// A volume anyone may write, but for Landlock.
		base, err := p.docker.ContainerCreate(t.Context(), client.ContainerCreateOptions{Image: testImage,
			Config: &container.Config{Cmd: []string{"mkdir", "-m", "1777", "/data"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.docker.ContainerRemove(context.Background(), base.ID, client.ContainerRemoveOptions{Force: true})
		if _, err := p.docker.ContainerStart(t.Context(), base.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
		wait := p.docker.ContainerWait(t.Context(), base.ID, client.ContainerWaitOptions{})
		select {
		case <-wait.Result:
		case err := <-wait.Error:
			t.Fatal(err)
		}
		if _, err := p.docker.ContainerCommit(t.Context(), base.ID, client.ContainerCommitOptions{Reference: image, Changes: []string{"VOLUME /data"}}); err != nil {
			t.Fatal(err)
		}
	}
	volumes := func() map[string]bool {
		list, err := p.docker.VolumeList(t.Context(), client.VolumeListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, v := range list.Items {
			m[v.Name] = true
		}
		return m
	}
	before := volumes()
	sb := create(t, p, provider.Spec{ID: "volumes", Image: image, Resources: provider.Resources{Memory: 64 << 20}})
	insp, err := p.docker.ContainerInspect(t.Context(), sb.rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range insp.Container.Mounts {
		if m.Type == "volume" {
			t.Errorf("the container has a Docker volume at %s", m.Destination)
		}
	}
	// Landlock keeps commands from writing there at all; the tmpfs is
	// what bounds it on a kernel without Landlock.
	if out := sh(t, sb, "grep ' /data ' /proc/self/mountinfo; touch /data/x 2>&1 || true"); !strings.Contains(out, " - tmpfs ") || !strings.Contains(out, "Permission denied") {
		t.Errorf("the image's volume is not a tmpfs that commands cannot write: %s", out)
	}
	if err := sb.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	for v := range volumes() {
		if !before[v] {
			t.Errorf("volume %s is left", v)
		}
	}
}

// TestWarmContainerFitted: a sandbox asking for CPU and process limits
// of its own, and the default memory and disk, still takes a warm
// container, given its limits.
func TestWarmContainerFitted(t *testing.T) {
	p := newTestProvider(t, Config{Pool: 1})
	create(t, p, provider.Spec{ID: "first"})
	w := firstWarm(t, p)
	def := p.resources(provider.Resources{})
	want := provider.Resources{CPU: def.CPU / 2, Pids: def.Pids / 2}
	if want.CPU == 0 {
		want.CPU = 0.5
	}
	sb := create(t, p, provider.Spec{ID: "fitted", Resources: want})
	if sb.rec.Container != w.container {
		t.Fatalf("the sandbox got container %s, not the warm %s", sb.rec.Container, w.container)
	}
	insp, err := p.docker.ContainerInspect(t.Context(), sb.rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := insp.Container.HostConfig
	if hc.NanoCPUs != int64(want.CPU*1e9) || hc.PidsLimit == nil || *hc.PidsLimit != want.Pids {
		t.Errorf("the warm container has CPUs %d and pids %v, want %d and %d", hc.NanoCPUs, hc.PidsLimit, int64(want.CPU*1e9), want.Pids)
	}
	if info, err := sb.Info(t.Context()); err != nil || info.Resources.CPU != want.CPU || info.Resources.Pids != want.Pids {
		t.Errorf("the sandbox reports %+v (%v), want CPU %v and pids %d", info.Resources, err, want.CPU, want.Pids)
	}
	sh(t, sb, "true")
}

// thrashProgram fills socket pairs until what the sandbox holds beyond
// the reach of reclaim (its cgroup's usage less its file pages) is
// within the given bytes of its limit, then, for 20 s, reads through a
// mapping of the workspace file "big", larger than what is left: the
// kernel evicts its pages and reads them back, and kills nothing, being
// under its limit. Then it says "done".
const thrashProgram = `
import mmap, os, socket, time
root = "/sys/fs/cgroup/"
if os.path.exists(root + "memory.current"):
    usage_file, limit_file, stat_file, keys = root + "memory.current", root + "memory.max", root + "memory.stat", ("active_file", "inactive_file")
else:
    root += "memory/"
    usage_file, limit_file, stat_file, keys = root + "memory.usage_in_bytes", root + "memory.limit_in_bytes", root + "memory.stat", ("total_active_file", "total_inactive_file")
def held():
    stat = dict(line.split() for line in open(stat_file))
    return int(open(usage_file).read()) - sum(int(stat[k]) for k in keys)
limit = int(open(limit_file).read())
chunk = b"s" * 16384
socks = []
while held() < limit - %d:
    a, b = socket.socketpair()
    socks.append((a, b))
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    a.setblocking(False)
    try:
        while True:
            a.send(chunk)
    except BlockingIOError:
        pass
print("holding", held() >> 20, "MiB of", limit >> 20, flush=True)
f = open("big", "rb")
m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
end = time.monotonic() + 20
passes = 0
while time.monotonic() < end:
    for i in range(0, len(m), 4096):
        m[i]
    passes += 1
print("done", passes, "passes", flush=True)
`

// TestMemoryThrash: a command that holds the sandbox's memory in kernel
// buffers, past the daemon's reserve (16 MiB) but under the limit, and
// needs more file pages than are left, is killed as out of memory, as
// on the linux provider (whose commands' cgroup is limited to the
// sandbox's limit less that reserve). The kernel would kill nothing:
// reclaim always frees some of the pages the command reads, and it
// reads them back, for as long as it runs. The sandbox serves on.
func TestMemoryThrash(t *testing.T) {
	p := newTestProvider(t, Config{Pool: -1})
	sb := create(t, p, provider.Spec{ID: "thrash", Resources: provider.Resources{Memory: 128 << 20}})
	sh(t, sb, "head -c 16777216 /dev/urandom > big")
	// Within 8 MiB of the limit: past the reserve, with room for the
	// daemon's own memory under the limit.
	program := fmt.Sprintf(thrashProgram, 8<<20)
	var stdout, stderr strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", program}, Stdout: &stdout, Stderr: &stderr})
	t.Logf("exit code %d, signal %q, out of memory %v, err %v, stdout %q, stderr %q", res.ExitCode, res.Signal, res.OOMKilled, err, stdout.String(), stderr.String())
	if !errors.Is(err, errdefs.ErrOutOfMemory) || !res.OOMKilled {
		t.Errorf("a command holding the sandbox's memory less 8 MiB in socket buffers and reading 16 MiB of mapped file: %v, want it killed as out of memory", err)
	}
	if out := sh(t, sb, "echo ok"); strings.TrimSpace(out) != "ok" {
		t.Errorf("a command after the kill says %q", out)
	}
}
