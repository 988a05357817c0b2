package activities

import (
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
		done, err := a.admit(lin, provider.Spec{ID: id, Resources: provider.Resources{Memory: mem}})
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
	done, err := a.admit(lin, provider.Spec{ID: "e", Resources: provider.Resources{Memory: 1 << 30}})
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
