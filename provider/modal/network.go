package modal

import (
	modal "github.com/modal-labs/modal-client/go"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// NetworkSupport implements remote.NetworkPolicer. Modal blocks a
// sandbox's outbound network or limits it to CIDR and domain allow
// lists (*.suffix wildcards too), on every port. It cannot change a
// running sandbox's: a new policy takes a hibernation.
func (a *API) NetworkSupport() remote.NetworkSupport {
	return remote.NetworkSupport{Open: true, Hosts: true, CIDRs: true}
}

// egress sets a policy on Modal's create parameters. Modal's default is
// the open network, so that NetworkNone is BlockNetwork.
func egress(params *modal.SandboxCreateParams, n provider.Network) error {
	switch n.Mode {
	case provider.NetworkOpen:
		return nil
	case provider.NetworkAllow:
	default:
		params.BlockNetwork = true
		return nil
	}
	hosts, err := n.HostRules()
	if err != nil {
		return err
	}
	cidrs, err := n.CIDRRules()
	if err != nil {
		return err
	}
	// Both lists, empty or not: a nil one would leave its dimension open.
	params.OutboundDomainAllowlist = &modal.Allowlist{Entries: []string{}}
	params.OutboundCIDRAllowlist = &modal.Allowlist{Entries: []string{}}
	for _, h := range hosts {
		params.OutboundDomainAllowlist.Entries = append(params.OutboundDomainAllowlist.Entries, h.Pattern())
	}
	for _, c := range cidrs {
		params.OutboundCIDRAllowlist.Entries = append(params.OutboundCIDRAllowlist.Entries, c.String())
	}
	return nil
}
