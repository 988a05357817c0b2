package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
)

func TestNetworkValidate(t *testing.T) {
	allow := func(hosts, cidrs []string, ports ...uint16) Network {
		return Network{Mode: NetworkAllow, Hosts: hosts, CIDRs: cidrs, Ports: ports}
	}
	many := make([]string, MaxNetworkRules+1)
	for i := range many {
		many[i] = fmt.Sprintf("h%d.example.com", i)
	}
	good := map[string]Network{
		"none":          {},
		"open":          {Mode: NetworkOpen},
		"host":          allow([]string{"pypi.org"}, nil),
		"wildcard":      allow([]string{"*.npmjs.org"}, nil),
		"host port":     allow([]string{"git.example.com:22"}, nil),
		"trailing dot":  allow([]string{"PyPI.org."}, nil),
		"cidr":          allow(nil, []string{"203.0.113.0/24"}),
		"address":       allow(nil, []string{"2001:db8::1"}),
		"ports":         allow([]string{"pypi.org"}, nil, 8080),
		"at the bounds": allow(many[:MaxNetworkRules], nil),
	}
	for name, n := range good {
		if err := n.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]Network{
		"unknown mode":        {Mode: "bogus"},
		"rules without allow": {Mode: NetworkOpen, Hosts: []string{"pypi.org"}},
		"ports with none":     {Ports: []uint16{80}},
		"allow, no rule":      {Mode: NetworkAllow},
		"too many rules":      allow(many, nil),
		"port 0":              allow([]string{"pypi.org"}, nil, 0),
		"host port 0":         allow([]string{"pypi.org:0"}, nil),
		"host bad port":       allow([]string{"pypi.org:http"}, nil),
		"space":               allow([]string{"evil example"}, nil),
		"empty label":         allow([]string{"a..b"}, nil),
		"leading hyphen":      allow([]string{"-a.b"}, nil),
		"long label":          allow([]string{strings.Repeat("a", 64) + ".com"}, nil),
		"long name":           allow([]string{strings.Repeat("a.", 127) + "com"}, nil),
		"ip as host":          allow([]string{"10.0.0.1"}, nil),
		"ipv6 as host":        allow([]string{"[::1]:443"}, nil),
		"bare ipv6 as host":   allow([]string{"2001:db8::1"}, nil),
		"star alone":          allow([]string{"*"}, nil),
		"wildcard tld":        allow([]string{"*.org"}, nil),
		"inner wildcard":      allow([]string{"a.*.org"}, nil),
		"bad cidr":            allow(nil, []string{"10.0.0.0/33"}),
		"name as cidr":        allow(nil, []string{"pypi.org"}),
		"mapped cidr":         allow(nil, []string{"::ffff:10.0.0.0/104"}),
		"empty host":          allow([]string{""}, nil),
	}
	for name, n := range bad {
		err := n.Validate()
		if !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("%s: %v, want an error wrapping ErrBadInput", name, err)
			continue
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: the error is not one line: %q", name, err)
		}
	}
}

func TestNetworkAllowsHost(t *testing.T) {
	n := Network{Mode: NetworkAllow, Hosts: []string{"pypi.org", "*.npmjs.org", "git.example.com:22"}}
	tests := []struct {
		name string
		port uint16
		want bool
	}{
		{"pypi.org", 443, true},
		{"PYPI.ORG.", 80, true},
		{"pypi.org", 22, false},
		{"files.pypi.org", 443, false},
		{"registry.npmjs.org", 443, true},
		{"a.b.npmjs.org", 443, true},
		{"npmjs.org", 443, false},
		{"evilnpmjs.org", 443, false},
		{"git.example.com", 22, true},
		{"git.example.com", 443, false},
		{"pypi.org.evil.example", 443, false},
		{"pypi.org\x00.evil.example", 443, false},
		{"", 443, false},
	}
	for _, tt := range tests {
		if got := n.AllowsHost(tt.name, tt.port); got != tt.want {
			t.Errorf("AllowsHost(%q, %d) = %v, want %v", tt.name, tt.port, got, tt.want)
		}
	}
	if (Network{}).AllowsHost("pypi.org", 443) {
		t.Error("NetworkNone allows a host")
	}
	if !(Network{Mode: NetworkOpen}).AllowsHost("anything.example", 8080) {
		t.Error("NetworkOpen refuses a host")
	}
	ported := Network{Mode: NetworkAllow, Hosts: []string{"pypi.org"}, Ports: []uint16{8443}}
	if ported.AllowsHost("pypi.org", 443) || !ported.AllowsHost("pypi.org", 8443) {
		t.Error("Ports does not replace the default ports")
	}
}

func TestNetworkAllowsAddr(t *testing.T) {
	n := Network{Mode: NetworkAllow, Hosts: []string{"pypi.org"}, CIDRs: []string{"203.0.113.0/24", "2001:db8::1"}}
	tests := []struct {
		addr string
		port uint16
		want bool
	}{
		{"203.0.113.7", 443, true},
		{"::ffff:203.0.113.7", 443, true},
		{"203.0.114.1", 443, false},
		{"203.0.113.7", 22, false},
		{"2001:db8::1", 80, true},
		{"2001:db8::2", 80, false},
		{"169.254.169.254", 80, false},
	}
	for _, tt := range tests {
		if got := n.AllowsAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
			t.Errorf("AllowsAddr(%s, %d) = %v, want %v", tt.addr, tt.port, got, tt.want)
		}
	}
	if (Network{Mode: NetworkOpen}).AllowsAddr(netip.MustParseAddr("203.0.113.7"), 443) {
		t.Error("NetworkOpen's AllowsAddr says yes: the provider decides which addresses an open sandbox reaches")
	}
}

func TestNetworkJSON(t *testing.T) {
	for in, want := range map[string]Network{
		`"open"`: {Mode: NetworkOpen},
		`""`:     {},
		`{"mode":"allow","hosts":["pypi.org"],"ports":[443]}`: {Mode: NetworkAllow, Hosts: []string{"pypi.org"}, Ports: []uint16{443}},
	} {
		var got Network
		if err := json.Unmarshal([]byte(in), &got); err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s decoded as %+v, want %+v", in, got, want)
		}
	}
	// A spec with the default policy says nothing of it.
	b, err := json.Marshal(Spec{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "network") {
		t.Errorf("a spec with no network policy encodes one: %s", b)
	}
	var spec Spec
	if err := json.Unmarshal([]byte(`{"id":"x","network":"open"}`), &spec); err != nil || spec.Network.Mode != NetworkOpen {
		t.Errorf("a spec of the earlier form decoded as %+v, %v", spec.Network, err)
	}
}

// TestNetworkPreset: every preset is a valid allow policy over HTTPS,
// and an unknown name is none.
func TestNetworkPreset(t *testing.T) {
	names := NetworkPresetNames()
	if len(names) == 0 {
		t.Fatal("no presets")
	}
	for _, name := range names {
		n, ok := NetworkPreset(name)
		if !ok || n.Mode != NetworkAllow || n.Validate() != nil {
			t.Errorf("preset %s: %+v, %v", name, n, n.Validate())
		}
		if !n.AllowsHost(n.Hosts[0], 443) || n.AllowsHost(n.Hosts[0], 80) {
			t.Errorf("preset %s reaches %s on 443 only", name, n.Hosts[0])
		}
	}
	if reg, _ := NetworkPreset("registries"); !reg.AllowsHost("pypi.org", 443) || !reg.AllowsHost("registry.npmjs.org", 443) || reg.AllowsHost("evil.example", 443) {
		t.Errorf("registries: %+v", reg)
	}
	if _, ok := NetworkPreset("nosuch"); ok {
		t.Error("an unknown preset")
	}
}
