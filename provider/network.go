package provider

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/errdefs"
)

// NetworkMode is what a sandbox may reach beyond its own loopback.
type NetworkMode string

const (
	// NetworkNone gives the sandbox a loopback interface of its own and
	// nothing else. It is the default.
	NetworkNone NetworkMode = ""
	// NetworkAllow lets the sandbox reach the hosts and address ranges
	// its policy lists, on the ports it lists, and nothing else.
	NetworkAllow NetworkMode = "allow"
	// NetworkOpen gives the sandbox outbound access.
	NetworkOpen NetworkMode = "open"
)

// Bounds of a network policy, so that a policy stays small enough to
// travel in a sandbox's spec and to be matched on every connection.
const (
	MaxNetworkRules = 256 // hosts and CIDRs together
	MaxNetworkPorts = 64
)

// DefaultNetworkPorts are the ports a NetworkAllow rule reaches when the
// policy names none and the rule carries no port of its own.
var DefaultNetworkPorts = []uint16{80, 443}

// Network is a sandbox's network policy. The zero value is NetworkNone.
//
// Under NetworkAllow, a host rule is a DNS name ("pypi.org") or a
// wildcard covering every name below a suffix ("*.npmjs.org", which does
// not cover npmjs.org itself), optionally with a port ("git.example.com:22").
// A CIDR rule is an address range or a single address ("203.0.113.0/24",
// "2001:db8::1"). A rule without a port reaches Ports, or
// DefaultNetworkPorts when Ports is empty. Names are matched as the
// sandbox gives them and resolved by the host, never by the sandbox, so
// that a name allowed cannot be made to lead to an address that is not.
//
// The policy holds no credential: it travels in workflow history.
type Network struct {
	Mode  NetworkMode `json:"mode,omitempty"`
	Hosts []string    `json:"hosts,omitempty"`
	CIDRs []string    `json:"cidrs,omitempty"`
	Ports []uint16    `json:"ports,omitempty"`
}

// UnmarshalJSON also reads the policy's earlier form, the mode alone as
// a string, so that sandboxes recorded with it decode.
func (n *Network) UnmarshalJSON(b []byte) error {
	var mode string
	if err := json.Unmarshal(b, &mode); err == nil {
		*n = Network{Mode: NetworkMode(mode)}
		return nil
	}
	type plain Network
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*n = Network(p)
	return nil
}

// Validate checks a policy: its mode is known, only NetworkAllow has
// rules and it has at least one, and every rule is well formed and
// within the bounds above. Its errors wrap errdefs.ErrBadInput.
func (n Network) Validate() error {
	switch n.Mode {
	case NetworkNone, NetworkOpen:
		if len(n.Hosts)+len(n.CIDRs)+len(n.Ports) != 0 {
			return badNetwork("rules are for the %q mode only, not %q", NetworkAllow, n.modeName())
		}
		return nil
	case NetworkAllow:
	default:
		return badNetwork("unknown mode %q (none, allow or open)", n.Mode)
	}
	if len(n.Hosts)+len(n.CIDRs) == 0 {
		return badNetwork("the allow mode needs at least one host or CIDR")
	}
	if len(n.Hosts)+len(n.CIDRs) > MaxNetworkRules {
		return badNetwork("%d rules, more than %d", len(n.Hosts)+len(n.CIDRs), MaxNetworkRules)
	}
	if len(n.Ports) > MaxNetworkPorts {
		return badNetwork("%d ports, more than %d", len(n.Ports), MaxNetworkPorts)
	}
	for _, p := range n.Ports {
		if p == 0 {
			return badNetwork("port 0")
		}
	}
	for _, h := range n.Hosts {
		if _, err := parseHostRule(h); err != nil {
			return err
		}
	}
	for _, c := range n.CIDRs {
		if _, err := parseCIDRRule(c); err != nil {
			return err
		}
	}
	return nil
}

func (n Network) modeName() string {
	if n.Mode == NetworkNone {
		return "none"
	}
	return string(n.Mode)
}

// AllowsHost reports whether the policy lets the sandbox reach the DNS
// name name on port. Under NetworkOpen every name is allowed; under
// NetworkNone none is. It says nothing of the addresses name resolves
// to: whoever dials checks those with AllowsAddr or its own rules.
func (n Network) AllowsHost(name string, port uint16) bool {
	switch n.Mode {
	case NetworkOpen:
		return true
	case NetworkAllow:
	default:
		return false
	}
	name, ok := canonicalName(name)
	if !ok {
		return false
	}
	for _, h := range n.Hosts {
		r, err := parseHostRule(h)
		if err != nil || !n.portAllowed(r.port, port) {
			continue
		}
		if r.wildcard && strings.HasSuffix(name, "."+r.name) || !r.wildcard && name == r.name {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether a CIDR rule of a NetworkAllow policy lets
// the sandbox reach addr on port. Host rules never allow an address, and
// neither does NetworkOpen: which addresses an open sandbox reaches is
// the provider's to say (none of the host's own, for one).
func (n Network) AllowsAddr(addr netip.Addr, port uint16) bool {
	if n.Mode != NetworkAllow {
		return false
	}
	addr = addr.Unmap()
	for _, c := range n.CIDRs {
		r, err := parseCIDRRule(c)
		if err == nil && r.Contains(addr) && n.portAllowed(0, port) {
			return true
		}
	}
	return false
}

func (n Network) portAllowed(rulePort, port uint16) bool {
	if rulePort != 0 {
		return port == rulePort
	}
	ports := n.Ports
	if len(ports) == 0 {
		ports = DefaultNetworkPorts
	}
	return slices.Contains(ports, port)
}

type hostRule struct {
	name     string // lower case, no trailing dot; the suffix of a wildcard
	wildcard bool
	port     uint16 // 0: the policy's ports
}

func parseHostRule(s string) (hostRule, error) {
	var r hostRule
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return r, badNetwork("host %q is an address: list it in CIDRs", s)
	}
	name := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || p == 0 {
			return r, badNetwork("host %q: bad port", s)
		}
		name, r.port = s[:i], uint16(p)
	}
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		name, r.wildcard = rest, true
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return r, badNetwork("host %q is an address: list it in CIDRs", s)
	}
	canon, ok := canonicalName(name)
	if !ok {
		return r, badNetwork("host %q is not a DNS name (letters, digits, '-', labels of 1 to 63, a leading \"*.\" for a wildcard)", s)
	}
	if r.wildcard && !strings.Contains(canon, ".") {
		return r, badNetwork("host %q: a wildcard must be below a name of two labels at least", s)
	}
	r.name = canon
	return r, nil
}

// canonicalName lower-cases a DNS name, drops one trailing dot, and
// reports whether it is a valid host name of at most 253 bytes.
func canonicalName(s string) (string, bool) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" || len(s) > 253 {
		return "", false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	return s, true
}

func parseCIDRRule(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, badNetwork("CIDR %q is not an address or an address range", s)
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, badNetwork("CIDR %q: give IPv4 ranges in IPv4 form", s)
	}
	return p.Masked(), nil
}

func badNetwork(format string, args ...any) error {
	return fmt.Errorf("%w: network policy: %s", errdefs.ErrBadInput, fmt.Sprintf(format, args...))
}

// networkPresets are named policies front ends offer by name
// (--network registries). "registries" lets a coding agent install
// packages: the public registries of Python (pip), JavaScript (npm,
// yarn), Go (the module proxy and checksum database), Rust (cargo) and
// Ruby (gem), over HTTPS alone.
var networkPresets = map[string][]string{
	"registries": {
		"pypi.org", "files.pythonhosted.org",
		"registry.npmjs.org", "registry.yarnpkg.com",
		"proxy.golang.org", "sum.golang.org",
		"crates.io", "index.crates.io", "static.crates.io",
		"rubygems.org", "index.rubygems.org",
	},
}

// NetworkPreset returns the policy named name, and whether there is one.
// Each call returns a policy of its own, which the caller may extend.
func NetworkPreset(name string) (Network, bool) {
	hosts, ok := networkPresets[name]
	if !ok {
		return Network{}, false
	}
	return Network{Mode: NetworkAllow, Hosts: slices.Clone(hosts), Ports: []uint16{443}}, true
}

// NetworkPresetNames lists the presets NetworkPreset knows, sorted.
func NetworkPresetNames() []string {
	names := make([]string, 0, len(networkPresets))
	for n := range networkPresets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// NetworkHost is a host rule of a policy, parsed: what a provider that
// hands the policy to a service of its own translates.
type NetworkHost struct {
	// Name is lower case, without a trailing dot; for a wildcard, the
	// suffix the names it covers end in.
	Name     string
	Wildcard bool
	// Port is the rule's own port; zero means the policy's ports.
	Port uint16
}

// Pattern is the rule without its port: "pypi.org", "*.npmjs.org".
func (h NetworkHost) Pattern() string {
	if h.Wildcard {
		return "*." + h.Name
	}
	return h.Name
}

// HostRules parses the policy's host rules; an invalid one is an error
// wrapping errdefs.ErrBadInput, as Validate says.
func (n Network) HostRules() ([]NetworkHost, error) {
	out := make([]NetworkHost, 0, len(n.Hosts))
	for _, h := range n.Hosts {
		r, err := parseHostRule(h)
		if err != nil {
			return nil, err
		}
		out = append(out, NetworkHost{Name: r.name, Wildcard: r.wildcard, Port: r.port})
	}
	return out, nil
}

// CIDRRules parses the policy's CIDR rules, a single address becoming a
// range of one; an invalid one is an error wrapping errdefs.ErrBadInput.
func (n Network) CIDRRules() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(n.CIDRs))
	for _, c := range n.CIDRs {
		p, err := parseCIDRRule(c)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}
