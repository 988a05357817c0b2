package remote

import (
	"context"
	"fmt"
	"slices"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// NetworkPolicer is implemented by an API whose service enforces egress
// policies of its own: Create then passes the sandbox's policy on, in
// CreateRequest.Network, once NetworkSupport says the service can hold
// it. An API without it leaves a machine the network its service or its
// template gives, which berth cannot see: Create refuses any policy but
// NetworkNone, and NetworkNone is then the service's to keep (see the
// provider's page).
type NetworkPolicer interface {
	NetworkSupport() NetworkSupport
}

// NetworkUpdater is implemented by an API that can change a running
// machine's egress policy; the sandboxes of the others refuse
// UpdateNetwork with errdefs.ErrUnsupported.
type NetworkUpdater interface {
	UpdateNetwork(ctx context.Context, m Machine, n provider.Network) error
}

// NetworkSupport says what of provider.Network a service enforces.
type NetworkSupport struct {
	// Open: a machine may have the service's outbound network whole.
	Open bool
	// Hosts and CIDRs: NetworkAllow's host rules (names and *.suffix
	// wildcards) and address ranges.
	Hosts, CIDRs bool
	// Ports: the service limits a rule to its ports. A service that
	// does not lets an allowed host or range be reached on every port:
	// a policy that names ports (Ports, or a host:port rule) is refused
	// there rather than widened, and one that names none (the default
	// ports) reaches every port of what it allows.
	Ports bool
	// MaxRules bounds the hosts and CIDRs of a policy; zero means
	// provider.MaxNetworkRules.
	MaxRules int
}

// check says whether the service can hold n, in one line wrapping
// errdefs.ErrUnsupported when it cannot.
func (s NetworkSupport) check(name string, n provider.Network) error {
	switch n.Mode {
	case provider.NetworkNone:
		return nil
	case provider.NetworkOpen:
		if !s.Open {
			return fmt.Errorf("%w: %s: no open network", errdefs.ErrUnsupported, name)
		}
		return nil
	}
	switch {
	case len(n.Hosts) > 0 && !s.Hosts:
		return fmt.Errorf("%w: %s enforces address ranges only, not host names (%s)", errdefs.ErrUnsupported, name, n.Hosts[0])
	case len(n.CIDRs) > 0 && !s.CIDRs:
		return fmt.Errorf("%w: %s enforces host names only, not address ranges (%s)", errdefs.ErrUnsupported, name, n.CIDRs[0])
	case s.MaxRules > 0 && len(n.Hosts)+len(n.CIDRs) > s.MaxRules:
		return fmt.Errorf("%w: %s holds at most %d network rules, not %d", errdefs.ErrUnsupported, name, s.MaxRules, len(n.Hosts)+len(n.CIDRs))
	}
	if !s.Ports {
		if len(n.Ports) > 0 && !slices.Equal(n.Ports, provider.DefaultNetworkPorts) {
			return fmt.Errorf("%w: %s cannot limit a rule to ports: it reaches every port of what it allows", errdefs.ErrUnsupported, name)
		}
		hosts, err := n.HostRules()
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.Port != 0 {
				return fmt.Errorf("%w: %s cannot limit %s to port %d: it reaches every port of what it allows", errdefs.ErrUnsupported, name, h.Pattern(), h.Port)
			}
		}
	}
	return nil
}

// networkSupport is the API's, if its service has any.
func (p *Provider) networkSupport() (NetworkSupport, bool) {
	np, ok := p.api.(NetworkPolicer)
	if !ok {
		return NetworkSupport{}, false
	}
	return np.NetworkSupport(), true
}

// checkNetwork says whether a machine of this provider can have n.
func (p *Provider) checkNetwork(n provider.Network) error {
	s, ok := p.networkSupport()
	if !ok {
		if n.Mode != provider.NetworkNone {
			return fmt.Errorf("%w: %s: no network policy (a machine has its template's network)", errdefs.ErrUnsupported, p.Name())
		}
		return nil
	}
	return s.check(p.Name(), n)
}

// UpdateNetwork implements provider.NetworkUpdater, through the API's
// own where it has one.
func (s *sandbox) UpdateNetwork(ctx context.Context, n provider.Network) error {
	if err := n.Validate(); err != nil {
		return err
	}
	if err := s.exists(); err != nil {
		return err
	}
	if err := s.p.checkNetwork(n); err != nil {
		return err
	}
	u, ok := s.p.api.(NetworkUpdater)
	if !ok {
		return fmt.Errorf("%w: %s cannot change a running sandbox's network", errdefs.ErrUnsupported, s.p.Name())
	}
	return u.UpdateNetwork(ctx, s.mc.snapshot(), n)
}

var _ provider.NetworkUpdater = (*sandbox)(nil)
