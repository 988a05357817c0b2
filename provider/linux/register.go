package linux

import (
	"context"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
)

func init() {
	provider.Register(Name, func(ctx context.Context, pc provider.Config) (provider.Provider, error) {
		cfg, err := fromProviderConfig(pc)
		if err != nil {
			return nil, err
		}
		cfg.Logger = provider.LoggerFrom(ctx)
		if err := cfg.openHostNet(ctx); err != nil {
			return nil, err
		}
		p, err := New(cfg)
		if err != nil {
			cfg.hostNet.Close()
			return nil, err
		}
		return p, nil
	})
}

// openHostNet starts the host side of sandboxes' networks that the
// network settings ask for (see package hostnet), and sets c.Network
// to it; the provider's Close stops it.
func (c *Config) openHostNet(ctx context.Context) error {
	// The proxy keeps its authority there: sandboxes that trust it
	// keep trusting it across restarts.
	c.netSettings.StateDir = c.StateDir
	h, err := hostnet.Open(ctx, Name, c.netSettings, networkDefaults(), c.Logger)
	if err != nil || h == nil {
		return err
	}
	c.hostNet = h
	c.Network = h.Network()
	return nil
}
