package e2b

import (
	"context"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/e2b/e2bapi"
	"github.com/berth-dev/berth/provider/remote"
)

// NetworkSupport implements remote.NetworkPolicer. E2B's allowOut takes
// names, *.suffix wildcards, CIDRs and addresses, but no ports: an
// allowed destination is reached on every port.
func (a *API) NetworkSupport() remote.NetworkSupport {
	return remote.NetworkSupport{Open: true, Hosts: true, CIDRs: true}
}

// UpdateNetwork implements remote.NetworkUpdater with E2B's own, which
// replaces the sandbox's rules as a whole.
func (a *API) UpdateNetwork(ctx context.Context, m remote.Machine, n provider.Network) error {
	internet, network, err := egress(n)
	if err != nil {
		return err
	}
	u := e2bapi.NetworkUpdate{AllowInternetAccess: &internet}
	if network != nil {
		u.AllowOut = network.AllowOut
	}
	return a.c.UpdateNetwork(ctx, m.ID, u)
}

// egress is a policy in E2B's terms. E2B gives a sandbox the internet
// unless told otherwise, so that NetworkNone is allow_internet_access
// false; NetworkAllow adds its rules as allowOut, which E2B lets through
// whatever else it denies.
func egress(n provider.Network) (internet bool, network *e2bapi.NetworkConfig, err error) {
	switch n.Mode {
	case provider.NetworkOpen:
		return true, nil, nil
	case provider.NetworkAllow:
	default:
		return false, nil, nil
	}
	hosts, err := n.HostRules()
	if err != nil {
		return false, nil, err
	}
	cidrs, err := n.CIDRRules()
	if err != nil {
		return false, nil, err
	}
	network = &e2bapi.NetworkConfig{}
	for _, h := range hosts {
		network.AllowOut = append(network.AllowOut, h.Pattern())
	}
	for _, c := range cidrs {
		network.AllowOut = append(network.AllowOut, c.String())
	}
	return false, network, nil
}
