package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/testkit"
)

// partitionHostTimeout is the sandboxes' host timeout in TestPartition:
// their host fences them at half of it once cut from the server, and
// their workflows take them for lost after it.
const partitionHostTimeout = 10 * time.Second

// TestPartition: a host holding two sandboxes, one with commands under
// way and one idle with a process of its own, all checkpointed, is cut
// from the server and the store (cluster.sh partition) past the
// heartbeat and host timeouts, its worker and sandboxes running on.
//
//   - Before the workflows could take them for lost, the host fences
//     them: every process of theirs but their daemon stops, while their
//     workflows still name these copies.
//   - The workflows take them for lost and make them again on other
//     hosts from their checkpoints; the commands under way fail as
//     SandboxLost, one of them having finished on the old copy during
//     the partition: its late result is not taken, nor its effect seen
//     in the new copy, and neither command runs again.
//   - Healed, the host destroys the old copies within the bound
//     docs/cluster.md gives (their processes gone, their cgroups and
//     state freed), a command sent after the move runs on the new copy
//     alone, and the host takes new sandboxes.
func TestPartition(t *testing.T) {
	t.Parallel()
	c := up(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	tc, bc := c.dial(ctx, t)

	// Two sandboxes on one host: made three at a time (placement spreads
	// them) until a host holds two.
	hosts := map[string][]*berth.Sandbox{}
	var cut string
	for batch := 0; cut == "" && batch < 3; batch++ {
		made := create(ctx, t, bc, tc, 3, fmt.Sprintf("part-%d", batch), partitionHostTimeout)
		for h, ss := range made {
			hosts[h] = append(hosts[h], ss...)
			if len(hosts[h]) >= 2 {
				cut = h
			}
		}
	}
	if cut == "" {
		t.Fatalf("no host holds two of 9 sandboxes: %v", placement(hosts))
	}
	busy, idle := hosts[cut][0], hosts[cut][1]
	n := strings.TrimPrefix(cut, "berth@h")
	t.Logf("host %s holds %s (commands) and %s (idle)", cut, busy.ID(), idle.ID())

	// Checkpointed (after every write and command), then a process of
	// the idle one's own, and two commands in the busy one: one that
	// runs on, and one that ends during the partition.
	for _, s := range []*berth.Sandbox{busy, idle} {
		if err := s.WriteFiles(ctx, berth.File{Path: "kept", Data: []byte("kept\n")}); err != nil {
			t.Fatal(err)
		}
	}
	execOK(ctx, t, idle, "nohup sleep 600 >/dev/null 2>&1 &")
	old := map[*berth.Sandbox]string{}
	copies := map[*berth.Sandbox]copyOf{}
	for _, s := range []*berth.Sandbox{busy, idle} {
		st, err := s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Checkpoint == "" {
			t.Fatalf("%s: no checkpoint", s.ID())
		}
		old[s] = st.Instance
		copies[s] = c.locate(t, n, st.Instance)
	}
	long, err := start(ctx, busy, "echo ran >> ran; sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the long command to run", 30*time.Second, func() bool {
		b, err := busy.ReadFile(ctx, "ran")
		return err == nil && string(b) == "ran\n"
	})
	late, err := start(ctx, busy, "sleep 2; echo late >> late")
	if err != nil {
		t.Fatal(err)
	}

	if err := c.run(t, "partition", n); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	healed := false
	defer func() {
		if !healed {
			_ = c.run(t, "heal", n)
		}
	}()

	// Fenced: the old copies' processes stop, but for their daemons,
	// before their workflows move them.
	for _, s := range []*berth.Sandbox{busy, idle} {
		for deadline := time.Now().Add(partitionHostTimeout); !copies[s].fenced(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s's old copy not fenced %v after the cut: its processes %v", s.ID(), time.Since(cutAt), procsOf(copies[s].cgroup))
			}
		}
		st, err := s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Instance != old[s] {
			t.Errorf("%s: fenced after its workflow had moved it to %s; want the fence first", s.ID(), st.Instance)
		}
	}
	t.Logf("fenced %v after the cut (half the host timeout: %v)", time.Since(cutAt).Round(time.Millisecond), partitionHostTimeout/2)

	// The workflows take them for lost and move them. The commands under
	// way fail as lost, the late one's result not taken.
	for _, cmd := range []struct {
		name string
		c    *berth.Command
	}{{"the long command", long}, {"the command that ended during the partition", late}} {
		res, err := cmd.c.Wait(ctx)
		if berth.KindOf(err) != berth.SandboxLost {
			t.Errorf("%s: %+v, %v; want %s", cmd.name, res, err, berth.SandboxLost)
		}
	}
	noticed := time.Since(cutAt)
	t.Logf("the commands failed as lost %v after the cut", noticed.Round(time.Millisecond))
	if noticed >= berth.DefaultHostTimeout {
		t.Errorf("lost after %v; want sooner than the default host timeout (%v): the sandbox's own is %v", noticed, berth.DefaultHostTimeout, partitionHostTimeout)
	}
	// The idle one, at its next operation, which fails as lost.
	argv, opts := sh("echo once >> once")
	if _, err := idle.Exec(ctx, argv, opts); berth.KindOf(err) != berth.SandboxLost {
		t.Errorf("the idle sandbox's first operation in the partition: %v; want %s", err, berth.SandboxLost)
	}
	for _, s := range []*berth.Sandbox{busy, idle} {
		if h := hostOf(ctx, t, tc, s.ID()); h == cut || h == "" {
			t.Errorf("%s is on %q after the loss; want another host than %s", s.ID(), h, cut)
		}
		if got := execOK(ctx, t, s, "cat kept; ls"); got != "kept\nkept\n" {
			t.Errorf("%s, recovered: %q; want its checkpoint (kept) alone: no ran, no late", s.ID(), got)
		}
		st, err := s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Running) != 0 || st.Instance == old[s] {
			t.Errorf("%s after the recovery: instance %s (was %s), running %v; want a new instance, nothing under way", s.ID(), st.Instance, old[s], st.Running)
		}
		// Still fenced, the old copy beside the new one.
		if !copies[s].fenced() {
			t.Errorf("%s: its old copy runs while its new one does", s.ID())
		}
	}
	if got := execOK(ctx, t, busy, "pgrep -c sleep || true"); got != "0\n" {
		t.Errorf("processes named sleep in the new copy: %q; want none (a command ran again?)", got)
	}

	// Healed: the old copies go, processes and all.
	if err := c.run(t, "heal", n); err != nil {
		t.Fatal(err)
	}
	healed = true
	healedAt := time.Now()
	for _, s := range []*berth.Sandbox{busy, idle} {
		testkit.Eventually(t, s.ID()+"'s old copy to be destroyed", healBound, copies[s].gone)
	}
	t.Logf("the old copies destroyed %v after the heal", time.Since(healedAt).Round(time.Millisecond))

	// After the move, commands run on the new copy alone.
	if got := execOK(ctx, t, busy, "echo after >> after; cat after"); got != "after\n" {
		t.Errorf("a command after the move: %q; want one line", got)
	}
	if got := execOK(ctx, t, idle, "cat once 2>/dev/null; echo twice >> once; cat once"); got != "twice\n" {
		t.Errorf("the idle sandbox's operation lost in the partition ran after all: %q", got)
	}

	// The host takes new sandboxes: it holds none now, and placement
	// puts the next on it.
	var back *berth.Sandbox
	for batch := 0; back == nil && batch < 3; batch++ {
		for h, ss := range create(ctx, t, bc, tc, 3, fmt.Sprintf("after-%d", batch), 0) {
			if h == cut {
				back = ss[0]
			}
		}
	}
	if back == nil {
		t.Fatalf("no new sandbox on %s after the heal", cut)
	}
	if got := execOK(ctx, t, back, "echo back"); got != "back\n" {
		t.Errorf("a new sandbox on the healed host: %q", got)
	}
	log, _ := os.ReadFile(filepath.Join(c.dir, "h"+n+".log"))
	for _, want := range []string{"fence: cut from the server", "fence: destroyed a copy"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("host %s's log has no %q", cut, want)
		}
	}
}

// healBound is how soon after a partition heals the host destroys the
// copies it holds that moved meanwhile (docs/cluster.md): its next
// answered probe, once its connection to the server is made again, and
// a Query of each owner.
const healBound = 30 * time.Second

// create makes n sandboxes named prefix-i at once and says where each
// went.
func create(ctx context.Context, t *testing.T, bc *berth.Client, tc client.Client, n int, prefix string, hostTimeout time.Duration) map[string][]*berth.Sandbox {
	t.Helper()
	sbxs := make([]*berth.Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range sbxs {
		wg.Go(func() {
			sbxs[i], errs[i] = bc.Sandboxes().Create(ctx, berth.SandboxOptions{
				ID: fmt.Sprintf("%s-%d", prefix, i), IdleTimeout: berth.Never, HibernateAfter: berth.Never,
				HostTimeout: hostTimeout, Checkpoint: berth.CheckpointPolicy{Every: 1},
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	where := map[string][]*berth.Sandbox{}
	for _, s := range sbxs {
		h := hostOf(ctx, t, tc, s.ID())
		where[h] = append(where[h], s)
	}
	return where
}

func start(ctx context.Context, s *berth.Sandbox, line string) (*berth.Command, error) {
	argv, opts := sh(line)
	return s.Start(ctx, argv, opts)
}

// copyOf is where a linux sandbox's copy lives on a host: its state
// directory, and the pids cgroup of its daemon, below which are its
// processes (a copy taken from the warm pool has a cgroup of the pool's
// naming).
type copyOf struct {
	state, cgroup string
	daemon        string // its pid
}

// locate reads copy id's record on host n.
func (c *cluster) locate(t *testing.T, n, id string) copyOf {
	t.Helper()
	state := filepath.Join(c.dir, "h"+n, "linux", id)
	b, err := os.ReadFile(filepath.Join(state, "sandbox.json"))
	if err != nil {
		t.Fatalf("the record of %s on host %s: %v", id, n, err)
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.PID <= 0 {
		t.Fatalf("the record of %s on host %s: %v (pid %d)", id, n, err, rec.PID)
	}
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", rec.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(cg), "\n") {
		// hierarchy-id:controllers:path
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "pids") {
			return copyOf{state: state, cgroup: filepath.Join("/sys/fs/cgroup/pids", f[2]), daemon: strconv.Itoa(rec.PID)}
		}
	}
	t.Fatalf("no pids cgroup of %s's daemon %d: %s", id, rec.PID, cg)
	return copyOf{}
}

// procsOf lists the processes of a cgroup and those below it, each as
// its pid, name and state.
func procsOf(cg string) []string {
	var procs []string
	_ = filepath.WalkDir(cg, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, pid := range strings.Fields(string(b)) {
			stat, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ...: comm may hold spaces and parentheses.
			s := string(stat)
			i := strings.LastIndexByte(s, ')')
			if i < 0 || i+2 >= len(s) {
				continue
			}
			procs = append(procs, pid+" "+s[strings.IndexByte(s, '(')+1:i]+" "+s[i+2:i+3])
		}
		return nil
	})
	return procs
}

// fenced says whether the copy has processes besides its daemon, and
// all of them are stopped.
func (c copyOf) fenced() bool {
	workload := 0
	for _, p := range procsOf(c.cgroup) {
		f := strings.Fields(p)
		pid, state := f[0], f[len(f)-1]
		if pid == c.daemon {
			continue
		}
		workload++
		if state != "T" && state != "t" && state != "Z" {
			return false
		}
	}
	return workload > 0
}

// gone says whether the copy is gone from its host: no cgroup (and so
// no process), no state directory.
func (c copyOf) gone() bool {
	for _, dir := range []string{c.cgroup, c.state} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	return true
}
