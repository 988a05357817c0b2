package activities

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// TestCapacity: creations are admitted up to the bounds, by count and
// by memory (a sandbox asking for none counted at the default); a retry
// of one admitted is admitted again; a failed creation frees its room,
// a destroyed sandbox too; a list of what the provider holds replaces
// the count, but not the sandboxes made since it was taken; a draining
// host admits nothing. Refusals are Quota errors IsHostFull reads.
func TestCapacity(t *testing.T) {
	c := &Capacity{MaxSandboxes: 3, MaxMemory: 5 << 30}
	a := &Activities{Capacity: c, HostQueue: "berth@h"}
	lin := fakeBound{}
	admit := func(id string, mem int64) error {
		done, err := a.admit(lin, provider.Spec{ID: id, Resources: provider.Resources{Memory: mem}}, nil)
		if err == nil {
			done(true)
		}
		return err
	}
	if err := admit("a", 0); err != nil { // 2 GiB
		t.Fatal(err)
	}
	if err := admit("b", 2<<30); err != nil {
		t.Fatal(err)
	}
	err := admit("c", 2<<30) // 6 GiB > 5
	if !IsHostFull(err) || !errorsIsQuota(err) {
		t.Errorf("past the memory bound: %v; want a host-full Quota error", err)
	}
	if err := admit("a", 0); err != nil {
		t.Errorf("a retry of an admitted creation: %v", err)
	}
	if err := admit("c", 1<<30); err != nil {
		t.Fatalf("1 GiB more, within both bounds: %v", err)
	}
	if err := admit("d", 1); !IsHostFull(err) {
		t.Errorf("past the count: %v; want host full", err)
	}
	if l := c.Load(0); l.Sandboxes != 3 || l.Memory != 5<<30 || l.Fits {
		t.Errorf("load %+v; want 3 sandboxes, 5 GiB, no room", l)
	}
	c.forget("linux/c")
	done, err := a.admit(lin, provider.Spec{ID: "e", Resources: provider.Resources{Memory: 1 << 30}}, nil)
	if err != nil {
		t.Fatalf("after a destroy: %v", err)
	}
	done(false) // the creation failed
	if l := c.Load(1 << 30); l.Sandboxes != 2 || !l.Fits {
		t.Errorf("after a failed creation: %+v; want 2 sandboxes and room", l)
	}

	listed := time.Now()
	if err := admit("f", 1<<20); err != nil { // made after the list below was taken
		t.Fatal(err)
	}
	c.Sync("linux", []provider.Info{{ID: "a"}, {ID: "x", Resources: provider.Resources{Memory: 1 << 30}}, {ID: "lost", State: provider.StateLost}}, listed)
	if l := c.Load(0); l.Sandboxes != 3 || l.Memory != 3<<30+1<<20 {
		t.Errorf("after a sync: %+v; want a, x and f (3 GiB 1 MiB), not b nor the lost one", l)
	}

	c.Drain()
	if err := admit("g", 1); !IsHostFull(err) {
		t.Errorf("a draining host: %v; want host full", err)
	}
	if l := c.Load(0); !l.Draining || l.Fits {
		t.Errorf("a draining host's load: %+v", l)
	}
	if (&Capacity{}).Load(1<<40).Fits != true {
		t.Error("a host without bounds has no room")
	}
}

func errorsIsQuota(err error) bool { return errdefs.KindOf(err) == errdefs.Quota }

// fakeBound is only a name and capabilities: admission asks nothing
// more of a provider.
type fakeBound struct{ provider.Provider }

func (fakeBound) Name() string { return "linux" }
func (fakeBound) Capabilities() provider.Capabilities {
	return provider.Capabilities{HostBound: true}
}

// TestBase reads sandbox ids as package sandbox makes them.
func TestBase(t *testing.T) {
	for id, want := range map[string]struct {
		base string
		gen  int
	}{
		"sb-0a1b2c": {"sb-0a1b2c", 1}, "sb-0a1b2c-2": {"sb-0a1b2c", 2}, "sb-0a1b2c-17": {"sb-0a1b2c", 17},
		"sb-0123456789": {"sb-0123456789", 1}, // all digits: still a base
		"other":         {"other", 1},
	} {
		if base, gen := Base(id); base != want.base || gen != want.gen {
			t.Errorf("Base(%q) = %q, %d; want %q, %d", id, base, gen, want.base, want.gen)
		}
	}
}

// TestCapacitySeen: a creation that carries the load placement read is
// admitted while the host holds no more than that, and refused as
// changed (not as full) once another creation took the host since; a
// retry of one admitted is admitted again whatever it saw.
func TestCapacitySeen(t *testing.T) {
	c := &Capacity{MaxSandboxes: 10}
	a := &Activities{Capacity: c, HostQueue: "berth@h"}
	lin := fakeBound{}
	empty := c.Load(0)
	seen := &Seen{Sandboxes: empty.Sandboxes, Memory: empty.Memory}
	admit := func(id string, seen *Seen) error {
		done, err := a.admit(lin, provider.Spec{ID: id}, seen)
		if err == nil {
			done(true)
		}
		return err
	}
	if err := admit("first", seen); err != nil {
		t.Fatalf("the first of two placed on the empty host: %v", err)
	}
	err := admit("second", seen)
	if !IsHostChanged(err) || IsHostFull(err) || !errorsIsQuota(err) {
		t.Errorf("the second placed on the same empty load: %v; want a Quota refusal IsHostChanged reads, not host full", err)
	}
	if err := admit("first", seen); err != nil {
		t.Errorf("a retry of the admitted creation: %v", err)
	}
	now := c.Load(0)
	if err := admit("second", &Seen{Sandboxes: now.Sandboxes, Memory: now.Memory}); err != nil {
		t.Errorf("the second placed again on the load as it is: %v", err)
	}
	if err := admit("third", nil); err != nil {
		t.Errorf("a creation placed without a load: %v", err)
	}
}

// TestCapacityDisk: a host whose disk has less free than it keeps
// takes no new sandbox (its load says it does not fit, and a creation
// is refused as host full, naming the disk); one with room takes them;
// the default keeps a twentieth of the disk, at least 1 GiB but at
// most a tenth.
func TestCapacityDisk(t *testing.T) {
	dir := t.TempDir()
	roomy := &Capacity{DiskDir: dir, MinFreeDisk: 1}
	if l := roomy.Load(0); !l.Fits || l.FreeDisk <= 0 || l.MinFreeDisk != 1 {
		t.Errorf("a disk with room: %+v; want it to fit, and the free disk told", l)
	}
	full := &Capacity{DiskDir: dir, MinFreeDisk: 1 << 62}
	if l := full.Load(0); l.Fits {
		t.Errorf("a disk with less free than kept: %+v; want no fit", l)
	}
	a := &Activities{Capacity: full, HostQueue: "berth@h"}
	_, err := a.admit(fakeBound{}, provider.Spec{ID: "x"}, nil)
	if !IsHostFull(err) || !strings.Contains(err.Error(), "min-free-disk") {
		t.Errorf("a creation on a full disk: %v; want host full, naming --min-free-disk", err)
	}
	if l := (&Capacity{DiskDir: dir, MinFreeDisk: -1}).Load(0); !l.Fits || l.MinFreeDisk != 0 {
		t.Errorf("no disk bound: %+v", l)
	}
	if l := (&Capacity{DiskDir: filepath.Join(dir, "gone")}).Load(0); l.Fits {
		t.Errorf("a disk that cannot be read: %+v; want no fit", l)
	}
	for _, c := range []struct{ size, want int64 }{
		{100 << 30, 5 << 30}, // a twentieth
		{10 << 30, 1 << 30},  // at least 1 GiB
		{4 << 30, 4 << 30 / 10},
		{512 << 20, 512 << 20 / 10}, // at most a tenth
	} {
		if got := DefaultMinFreeDisk(c.size); got != c.want {
			t.Errorf("DefaultMinFreeDisk(%d MiB) = %d MiB, want %d MiB", c.size>>20, got>>20, c.want>>20)
		}
	}
}
