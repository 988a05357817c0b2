package activities

import (
	"context"
	"fmt"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// NetworkInput asks for a running sandbox's network policy to change.
// A Sandbox with no ID asks only whether its provider can enforce the
// policy, for a sandbox that does not exist now (hibernated).
type NetworkInput struct {
	Sandbox refs.Sandbox     `json:"sandbox"`
	Network provider.Network `json:"network"`
}

// UpdateNetwork changes a running (or paused) sandbox's network policy
// in place. A provider that cannot fails with errdefs.ErrUnsupported:
// the policy then takes effect when the sandbox is next created.
func (a *Activities) UpdateNetwork(ctx context.Context, in NetworkInput) error {
	return toTemporal(a.updateNetwork(ctx, in))
}

func (a *Activities) updateNetwork(ctx context.Context, in NetworkInput) error {
	if err := in.Network.Validate(); err != nil {
		return err
	}
	p, err := a.provider(in.Sandbox.Provider)
	if err != nil {
		return err
	}
	if in.Network.Mode == provider.NetworkAllow && !p.Capabilities().NetworkAllow ||
		in.Network.Mode == provider.NetworkOpen && !p.Capabilities().Network {
		return fmt.Errorf("%w: provider %s cannot give a sandbox network %q", errdefs.ErrUnsupported, in.Sandbox.Provider, in.Network.Mode)
	}
	if in.Sandbox.ID == "" {
		return nil
	}
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return err
	}
	u, ok := sb.(provider.NetworkUpdater)
	if !ok {
		return fmt.Errorf("%w: provider %s cannot change a running sandbox's network", errdefs.ErrUnsupported, in.Sandbox.Provider)
	}
	return u.UpdateNetwork(ctx, in.Network)
}
