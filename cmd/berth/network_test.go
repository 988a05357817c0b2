package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
)

// TestNetworkFlags: the flags make the policy they say, rules alone mean
// allow, a preset takes rules beside it, and every contradiction or
// malformed rule is a one-line usage error.
func TestNetworkFlags(t *testing.T) {
	registries, _ := berth.NetworkPreset("registries")
	for _, tc := range []struct {
		name  string
		flags networkFlags
		want  berth.Network
		err   string
	}{
		{name: "none", flags: networkFlags{mode: "none"}, want: berth.Network{}},
		{name: "open", flags: networkFlags{mode: "open"}, want: berth.Network{Mode: berth.NetworkOpen}},
		{name: "rules alone", flags: networkFlags{hosts: []string{"pypi.org", "*.npmjs.org"}, cidrs: []string{"203.0.113.0/24"}},
			want: berth.Network{Mode: berth.NetworkAllow, Hosts: []string{"pypi.org", "*.npmjs.org"}, CIDRs: []string{"203.0.113.0/24"}}},
		{name: "allow with ports", flags: networkFlags{mode: "allow", hosts: []string{"git.example.com"}, ports: []string{"22", "443"}},
			want: berth.Network{Mode: berth.NetworkAllow, Hosts: []string{"git.example.com"}, Ports: []uint16{22, 443}}},
		{name: "preset", flags: networkFlags{mode: "registries"}, want: registries},
		{name: "preset and a host", flags: networkFlags{mode: "registries", hosts: []string{"git.example.com"}},
			want: berth.Network{Mode: berth.NetworkAllow, Hosts: append(slices.Clone(registries.Hosts), "git.example.com"), Ports: registries.Ports}},
		{name: "allow without rules", flags: networkFlags{mode: "allow"}, err: "needs --allow-host"},
		{name: "open with rules", flags: networkFlags{mode: "open", hosts: []string{"pypi.org"}}, err: "need --network allow"},
		{name: "none with rules", flags: networkFlags{mode: "none", cidrs: []string{"10.0.0.0/8"}}, err: "need --network allow"},
		{name: "unknown mode", flags: networkFlags{mode: "some"}, err: `--network "some"`},
		{name: "bad port", flags: networkFlags{hosts: []string{"pypi.org"}, ports: []string{"70000"}}, err: "--allow-port"},
		{name: "port zero", flags: networkFlags{hosts: []string{"pypi.org"}, ports: []string{"0"}}, err: "--allow-port"},
		{name: "bad host", flags: networkFlags{hosts: []string{"pypi.org/simple"}}, err: "pypi.org/simple"},
		{name: "bad cidr", flags: networkFlags{cidrs: []string{"10.0.0.0/33"}}, err: "10.0.0.0/33"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.flags.policy()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("policy() = %+v, %v; want one line with %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tc.want.Mode || !slices.Equal(got.Hosts, tc.want.Hosts) || !slices.Equal(got.CIDRs, tc.want.CIDRs) || !slices.Equal(got.Ports, tc.want.Ports) {
				t.Errorf("policy() = %+v, want %+v", got, tc.want)
			}
		})
	}
	// A preset is a copy: extending one leaves the next as it was.
	a, _ := berth.NetworkPreset("registries")
	a.Hosts[0] = "changed.example"
	if b, _ := berth.NetworkPreset("registries"); b.Hosts[0] == "changed.example" {
		t.Error("NetworkPreset hands out its own slice")
	}
}

// TestDescribeNetwork: inspect's one line says the policy whole.
func TestDescribeNetwork(t *testing.T) {
	for n, want := range map[*berth.Network]string{
		{}:                        "none",
		{Mode: berth.NetworkOpen}: "open",
		{Mode: berth.NetworkAllow, Hosts: []string{"pypi.org", "*.npmjs.org"}, CIDRs: []string{"203.0.113.0/24"}, Ports: []uint16{443}}: "allow hosts=pypi.org,*.npmjs.org cidrs=203.0.113.0/24 ports=443",
	} {
		if got := describeNetwork(*n); got != want {
			t.Errorf("describeNetwork(%+v) = %q, want %q", *n, got, want)
		}
	}
}
