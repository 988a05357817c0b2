package hostworker

import (
	"context"
	"log/slog"
	"time"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
)

// Bounds of how often the host looks for the sandboxes it holds: a third
// of the shortest lease among them, within these.
const (
	minRenewEvery = 250 * time.Millisecond
	maxRenewEvery = 2 * time.Second
)

// renewLeases renews, until ctx ends, the lease of every sandbox that the
// host-bound providers hold, each at a third of its lease: while the host
// serves, no sandbox of its stops for want of contact; once it is gone,
// each stops itself after its lease (see provider.Leaser). What it lists
// is the host's count of its sandboxes, against its capacity.
func renewLeases(ctx context.Context, providers map[string]provider.Provider, capacity *activities.Capacity, log *slog.Logger) {
	renewed := map[string]time.Time{} // provider/id => last renewal
	for {
		every := maxRenewEvery
		seen := map[string]bool{}
		for name, p := range providers {
			if !p.Capabilities().HostBound {
				continue
			}
			listed := time.Now()
			infos, err := p.List(ctx, nil)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("list sandboxes to renew their leases", "provider", name, "err", err)
				}
				continue
			}
			capacity.Sync(name, infos, listed)
			for _, info := range infos {
				if info.Lease <= 0 || info.State == provider.StateLost {
					continue
				}
				key := name + "/" + info.ID
				seen[key] = true
				every = min(every, info.Lease/3)
				if time.Since(renewed[key]) < info.Lease/3 {
					continue
				}
				if err := renew(ctx, p, info.ID); err != nil {
					if ctx.Err() == nil {
						log.Warn("renew a sandbox's lease", "provider", name, "id", info.ID, "err", err)
					}
					continue
				}
				renewed[key] = time.Now()
			}
		}
		for key := range renewed {
			if !seen[key] {
				delete(renewed, key)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(every, minRenewEvery)):
		}
	}
}

func renew(ctx context.Context, p provider.Provider, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sb, err := p.Get(ctx, id)
	if err != nil {
		return err
	}
	if l, ok := sb.(provider.Leaser); ok {
		return l.Renew(ctx)
	}
	return nil
}
