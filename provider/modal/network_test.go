package modal_test

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/modal"
	"github.com/berth-dev/berth/provider/modal/modalfake"
	"github.com/berth-dev/berth/provider/remote"
)

// TestNetwork: each policy reaches Modal, through the SDK, as its own
// outbound access: none is BLOCKED (Modal's default is open), allow is
// an ALLOWLIST of the policy's domains and CIDRs, open is OPEN. Modal
// cannot change a running sandbox's, and what it cannot hold (ports) is
// refused, making no sandbox.
func TestNetwork(t *testing.T) {
	ctx := t.Context()
	f := newFake(t, modalfake.Options{})
	a := newAPI(t, f, modal.Config{})
	allow := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org", "*.npmjs.org"}, CIDRs: []string{"203.0.113.0/24"}}
	for i, tc := range []struct {
		n              provider.Network
		kind           string
		cidrs, domains []string
	}{
		{provider.Network{}, "BLOCKED", nil, nil},
		{allow, "ALLOWLIST", []string{"203.0.113.0/24"}, []string{"pypi.org", "*.npmjs.org"}},
		{provider.Network{Mode: provider.NetworkOpen}, "OPEN", nil, nil},
		// CIDRs alone: the domain list is empty, not absent.
		{provider.Network{Mode: provider.NetworkAllow, CIDRs: []string{"198.51.100.7"}}, "ALLOWLIST", []string{"198.51.100.7/32"}, nil},
	} {
		m, err := a.Create(ctx, remote.CreateRequest{Name: "berth-net-" + strconv.Itoa(i), Lifetime: time.Hour, Network: tc.n})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Delete(t.Context(), m) })
		kind, cidrs, domains := f.Network(m.ID)
		if kind != tc.kind || !slices.Equal(cidrs, tc.cidrs) || !slices.Equal(domains, tc.domains) {
			t.Errorf("%+v: Modal holds %s %q %q; want %s %q %q", tc.n, kind, cidrs, domains, tc.kind, tc.cidrs, tc.domains)
		}
	}
	if _, ok := any(a).(remote.NetworkUpdater); ok {
		t.Error("Modal cannot change a running sandbox's network, yet the API says it can")
	}
	p := remote.New(a, remote.Config{DaemonPath: "/bin/true", Secret: []byte("the network test's secret")})
	if c := p.Capabilities(); !c.Network || !c.NetworkAllow {
		t.Errorf("capabilities: %+v, want network and network-allow", c)
	}
	_, err := p.Create(ctx, provider.Spec{ID: "refused", Network: provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"git.example.com:22"}}})
	if !errors.Is(err, errdefs.ErrUnsupported) {
		t.Errorf("a host:port rule: %v, want unsupported", err)
	}
}
