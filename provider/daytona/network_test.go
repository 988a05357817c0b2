package daytona_test

import (
	"errors"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/daytona"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/remote"
)

// TestNetwork: each policy reaches Daytona as its own settings: none
// blocks all (a Daytona sandbox has the network otherwise), allow is the
// CIDR allow list, open neither; a running sandbox's are changed live,
// an old allow list cleared. Host names, which Daytona does not know,
// are refused rather than dropped, and make no sandbox.
func TestNetwork(t *testing.T) {
	ctx := t.Context()
	f := newFake(t, daytonafake.Options{})
	a := newAPI(t, f, daytona.Config{})
	allow := provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{"203.0.113.0/24", "198.51.100.7"}}
	const wantList = "203.0.113.0/24,198.51.100.7/32"
	check := func(what, id string, blockAll bool, list string) {
		t.Helper()
		if gotBlock, gotList := f.Network(id); gotBlock != blockAll || gotList != list {
			t.Errorf("%s: Daytona holds blockAll %v, allow list %q; want %v, %q", what, gotBlock, gotList, blockAll, list)
		}
	}
	machines := map[provider.NetworkMode]remote.Machine{}
	for _, n := range []provider.Network{{}, allow, {Mode: provider.NetworkOpen}} {
		m, err := a.Create(ctx, remote.CreateRequest{Name: "b-net-" + string(n.Mode), Network: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
		machines[n.Mode] = m
	}
	check("none", machines[provider.NetworkNone].ID, true, "")
	check("allow", machines[provider.NetworkAllow].ID, false, wantList)
	check("open", machines[provider.NetworkOpen].ID, false, "")

	m := machines[provider.NetworkNone]
	for _, step := range []struct {
		n        provider.Network
		blockAll bool
		list     string
	}{{allow, false, wantList}, {provider.Network{Mode: provider.NetworkOpen}, false, ""}, {provider.Network{}, true, ""}} {
		if err := a.UpdateNetwork(ctx, m, step.n); err != nil {
			t.Fatal(err)
		}
		check("updated to "+string(step.n.Mode), m.ID, step.blockAll, step.list)
	}

	p := remote.New(a, remote.Config{DaemonPath: "/bin/true", Secret: []byte("the network test's secret")})
	if c := p.Capabilities(); !c.Network || !c.NetworkAllow {
		t.Errorf("capabilities: %+v, want network and network-allow", c)
	}
	before := len(f.Sandboxes())
	for _, n := range []provider.Network{
		{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}},
		{Mode: provider.NetworkAllow, CIDRs: []string{"203.0.113.0/24"}, Ports: []uint16{22}},
	} {
		if _, err := p.Create(ctx, provider.Spec{ID: "refused", Network: n}); !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("%+v: %v, want unsupported", n, err)
		}
	}
	if after := len(f.Sandboxes()); after != before {
		t.Errorf("refused policies made %d sandboxes", after-before)
	}
}
