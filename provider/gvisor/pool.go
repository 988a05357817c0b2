package gvisor

import (
	"context"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/warmpool"
)

// newPool makes the pool of started containers, ready so that creating
// a sandbox is a claim over a socket rather than runsc's start (bundle,
// workspace image, sandbox and gofer processes, the daemon's start). It
// fills itself in the background from the first take on.
func (p *Provider) newPool() *warmpool.Pool[*container] {
	return &warmpool.Pool[*container]{
		Size: p.cfg.Pool,
		Start: func(ctx context.Context) (*container, error) {
			return p.startContainer(ctx, "", p.cfg.Defaults, nil)
		},
		Alive:   func(c *container) bool { return hostproc.Alive(c.pid, c.pidStart) },
		Discard: p.discard,
		Log:     p.log,
		What:    "a warm gVisor container",
	}
}

// takeWarm returns a started container, or nil when none is ready. A
// sandbox with a root filesystem of its own, or limits other than the
// defaults, is always started fresh.
func (p *Provider) takeWarm(rootfs string, res provider.Resources) *container {
	if rootfs != "" || res != p.cfg.Defaults {
		return nil
	}
	c, _ := p.pool.Take()
	return c
}

// discard removes a container the pool did not give out.
func (p *Provider) discard(c *container) {
	c.release()
	if err := p.teardown(context.Background(), c.id); err != nil {
		p.log.Warn("remove a warm container", "container", c.id, "err", err)
	}
}
