package daytona

import (
	"context"
	"strings"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote"
)

// NetworkSupport implements remote.NetworkPolicer. Daytona blocks a
// sandbox's network or limits it to a list of CIDRs, on every port; it
// knows no host names.
func (a *API) NetworkSupport() remote.NetworkSupport {
	return remote.NetworkSupport{Open: true, CIDRs: true}
}

// UpdateNetwork implements remote.NetworkUpdater with Daytona's network
// settings of a running sandbox.
func (a *API) UpdateNetwork(ctx context.Context, m remote.Machine, n provider.Network) error {
	blockAll, allowList, err := egress(n)
	if err != nil {
		return err
	}
	// An empty list clears one an earlier policy set.
	settings := apiclient.UpdateSandboxNetworkSettings{NetworkBlockAll: &blockAll, NetworkAllowList: ptr("")}
	if allowList != nil {
		settings.NetworkAllowList = allowList
	}
	_, resp, err := a.api.SandboxAPI.UpdateNetworkSettings(a.auth(ctx), m.ID).UpdateSandboxNetworkSettings(settings).Execute()
	if err != nil {
		return classifyAPI("update network settings", err, resp, a.cfg.APIKey)
	}
	return nil
}

// egress is a policy in Daytona's terms: NetworkNone blocks all (a
// Daytona sandbox has the network unless told otherwise), NetworkAllow
// is its CIDR allow list.
func egress(n provider.Network) (blockAll bool, allowList *string, err error) {
	switch n.Mode {
	case provider.NetworkOpen:
		return false, nil, nil
	case provider.NetworkAllow:
	default:
		return true, nil, nil
	}
	cidrs, err := n.CIDRRules()
	if err != nil {
		return false, nil, err
	}
	list := make([]string, len(cidrs))
	for i, c := range cidrs {
		list[i] = c.String()
	}
	return false, ptr(strings.Join(list, ",")), nil
}
