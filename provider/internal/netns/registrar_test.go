package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// registry records what a Manager tells the egress proxy, and refuses a
// source twice as the proxy does. (The proxy itself is driven through
// these calls in provider/linux's tests, from inside sandboxes.)
type registry struct {
	mu     sync.Mutex
	live   map[netip.Addr]registration
	refuse error // returned by Register when set
}

func newRegistry() *registry { return &registry{live: map[netip.Addr]registration{}} }

func (r *registry) Register(src netip.Addr, id string, policy provider.Network) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse != nil {
		return nil, r.refuse
	}
	if other, ok := r.live[src]; ok {
		return nil, fmt.Errorf("%w: source %s is %s's", errdefs.ErrAlreadyExists, src, other.id)
	}
	reg := registration{id: id, policy: policy}
	r.live[src] = reg
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.live, src)
			r.mu.Unlock()
		})
	}, nil
}

// has checks that src is registered as id under policy, or (id "") not
// at all.
func (r *registry) has(t *testing.T, src netip.Addr, id string, policy provider.Network) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	got, ok := r.live[src]
	switch {
	case id == "" && ok:
		t.Errorf("%s is registered as %s, want it unregistered", src, got.id)
	case id != "" && !ok:
		t.Errorf("%s is not registered, want it %s's", src, id)
	case id != "" && (got.id != id || !samePolicy(got.policy, policy)):
		t.Errorf("%s is registered as %s under %+v, want %s under %+v", src, got.id, got.policy, id, policy)
	}
}

func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.live)
}

var errProxyDown = errors.New("egress proxy down")

func TestRegistrar(t *testing.T) {
	reg := newRegistry()
	e := newEnv(t, func(c *Config) { c.Proxy = reg })
	open := provider.Network{Mode: provider.NetworkOpen}
	_, a := e.sandbox(t, "sb-a", allowPolicy)
	_, b := e.sandbox(t, "sb-b", open)
	reg.has(t, a.Addr, "sb-a", allowPolicy)
	reg.has(t, b.Addr, "", provider.Network{})

	narrower := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	for _, step := range []struct {
		name   string
		id     string
		addr   netip.Addr
		policy provider.Network
		want   string // the id registered after, "" for none
	}{
		{"allow to a narrower allow", "sb-a", a.Addr, narrower, "sb-a"},
		{"allow to open", "sb-a", a.Addr, open, ""},
		{"open to allow", "sb-b", b.Addr, allowPolicy, "sb-b"},
	} {
		t.Run(step.name, func(t *testing.T) {
			if err := e.m.Update(t.Context(), step.id, step.policy); err != nil {
				t.Fatal(err)
			}
			reg.has(t, step.addr, step.want, step.policy)
		})
	}

	// A process that restarts: its proxy is new and knows nothing, the
	// links and state files outlived it. The Manager it opens over the
	// same state registers every NetworkAllow sandbox again.
	if err := e.m.Update(t.Context(), "sb-a", narrower); err != nil {
		t.Fatal(err)
	}
	e.m.Close()
	if n := reg.count(); n != 0 {
		t.Errorf("Close left %d registrations", n)
	}
	fresh := newRegistry()
	m2, err := New(Config{Uplink: e.tp.Uplink, ProxyAddr: e.proxy.Addr, StateDir: e.state, Resolver: e.tp.Resolver(), Proxy: fresh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	e.m = m2
	fresh.has(t, a.Addr, "sb-a", narrower)
	fresh.has(t, b.Addr, "sb-b", allowPolicy)
	// An explicit Reregister, with everything registered, changes nothing.
	if err := m2.Reregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := fresh.count(); n != 2 {
		t.Errorf("%d registrations after Reregister, want 2", n)
	}

	// Sweep forgets the dead and keeps the live.
	if err := m2.Sweep(t.Context(), func(id string) bool { return id == "sb-b" }); err != nil {
		t.Fatal(err)
	}
	fresh.has(t, a.Addr, "", provider.Network{})
	fresh.has(t, b.Addr, "sb-b", allowPolicy)
	e.gone(t, "sb-a")

	if err := m2.Detach(t.Context(), "sb-b"); err != nil {
		t.Fatal(err)
	}
	fresh.has(t, b.Addr, "", provider.Network{})
}

// TestRegistrarRefuses: a proxy that refuses a sandbox fails its Attach
// and leaves nothing of it; an Update it refuses leaves the old policy,
// in the kernel and in the proxy.
func TestRegistrarRefuses(t *testing.T) {
	reg := newRegistry()
	e := newEnv(t, func(c *Config) { c.Proxy = reg })
	path, _ := e.tp.Namespace("sb-r")
	reg.refuse = errProxyDown
	if _, err := e.m.Attach(t.Context(), "sb-r", path, 0, allowPolicy); !errors.Is(err, errProxyDown) {
		t.Fatalf("Attach with a refusing proxy = %v", err)
	}
	e.gone(t, "sb-r")
	reg.refuse = nil
	l, err := e.m.Attach(t.Context(), "sb-r", path, 0, allowPolicy)
	if err != nil {
		t.Fatal(err)
	}
	reg.refuse = errProxyDown
	narrower := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	if err := e.m.Update(t.Context(), "sb-r", narrower); !errors.Is(err, errProxyDown) {
		t.Fatalf("Update with a refusing proxy = %v", err)
	}
	if got, err := e.m.Link("sb-r"); err != nil || !samePolicy(got.Policy, allowPolicy) {
		t.Errorf("after a refused Update the record says %+v, %v", got, err)
	}
	reg.refuse = nil
	// The proxy refused the old policy back too; once it recovers,
	// Reregister gives it the policy the record holds.
	if err := e.m.Reregister(t.Context()); err != nil {
		t.Fatal(err)
	}
	reg.has(t, l.Addr, "sb-r", allowPolicy)
}
