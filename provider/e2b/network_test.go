package e2b_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b/e2bapi"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote"
)

// TestNetwork: each policy reaches E2B as its own egress rules, read
// back from the API as E2B answers them: none is no internet (E2B's
// default is the internet), allow is no internet but the allowOut list,
// open is the internet; a running sandbox's rules are replaced live.
// What E2B cannot hold, ports, is refused rather than widened.
func TestNetwork(t *testing.T) {
	ctx := t.Context()
	f, a := newAPI(t, e2bfake.Options{})
	c, err := e2bapi.New(e2bapi.Options{APIURL: f.URL(), APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	allow := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"PyPI.org", "*.npmjs.org"}, CIDRs: []string{"203.0.113.0/24", "198.51.100.7"}}
	wantAllow := []string{"pypi.org", "*.npmjs.org", "203.0.113.0/24", "198.51.100.7/32"}
	held := func(id string) (internet *bool, allowOut []string) {
		t.Helper()
		d, err := c.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if d.Network != nil {
			allowOut = d.Network.AllowOut
		}
		return d.AllowInternetAccess, allowOut
	}
	check := func(what, id string, internet bool, allowOut []string) {
		t.Helper()
		gotNet, gotAllow := held(id)
		if gotNet == nil || *gotNet != internet || !slices.Equal(gotAllow, allowOut) {
			t.Errorf("%s: E2B holds internet %v, allowOut %q; want %v, %q", what, deref(gotNet), gotAllow, internet, allowOut)
		}
	}
	machines := map[provider.NetworkMode]remote.Machine{}
	for _, n := range []provider.Network{{}, allow, {Mode: provider.NetworkOpen}} {
		m, err := a.Create(ctx, remote.CreateRequest{Name: "berth-net-" + string(n.Mode), Lifetime: time.Minute, Network: n})
		if err != nil {
			t.Fatal(err)
		}
		machines[n.Mode] = m
	}
	check("none", machines[provider.NetworkNone].ID, false, nil)
	check("allow", machines[provider.NetworkAllow].ID, false, wantAllow)
	check("open", machines[provider.NetworkOpen].ID, true, nil)

	m := machines[provider.NetworkNone]
	for _, step := range []struct {
		n        provider.Network
		internet bool
		allowOut []string
	}{{allow, false, wantAllow}, {provider.Network{Mode: provider.NetworkOpen}, true, nil}, {provider.Network{}, false, nil}} {
		if err := a.UpdateNetwork(ctx, m, step.n); err != nil {
			t.Fatal(err)
		}
		check("updated to "+string(step.n.Mode), m.ID, step.internet, step.allowOut)
	}
	if n := f.Requests("PUT /sandboxes/{sandboxID}/network"); n != 3 {
		t.Errorf("%d network updates reached E2B, want 3", n)
	}
	if err := a.UpdateNetwork(ctx, remote.Machine{ID: "inosuch"}, allow); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("updating a sandbox that is not there: %v, want not found", err)
	}

	s := a.NetworkSupport()
	if !s.Open || !s.Hosts || !s.CIDRs || s.Ports {
		t.Errorf("E2B's network support: %+v", s)
	}
}

// TestNetworkRefused: through the provider, a policy naming ports E2B
// cannot hold is refused with Unsupported, and makes no sandbox.
func TestNetworkRefused(t *testing.T) {
	f, a := newAPI(t, e2bfake.Options{})
	p := remote.New(a, remote.Config{DaemonPath: "/bin/true", Secret: []byte("the network test's secret")})
	if c := p.Capabilities(); !c.Network || !c.NetworkAllow {
		t.Errorf("capabilities: %+v, want network and network-allow", c)
	}
	for _, n := range []provider.Network{
		{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}, Ports: []uint16{22}},
		{Mode: provider.NetworkAllow, Hosts: []string{"git.example.com:22"}},
	} {
		_, err := p.Create(t.Context(), provider.Spec{ID: "refused", Network: n})
		if !errors.Is(err, errdefs.ErrUnsupported) {
			t.Errorf("%+v: %v, want unsupported", n, err)
		}
	}
	if got := f.Sandboxes(); len(got) != 0 {
		t.Errorf("refused policies made %v", got)
	}
}

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
