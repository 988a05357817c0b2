package gvisor

import (
	"context"
	"sync"
	"time"

	"github.com/berth-dev/berth/provider"
)

// pool keeps started containers ready, so that creating a sandbox is a
// claim over a socket rather than runsc's start (bundle, workspace
// image, sandbox and gofer processes, the daemon's start). It fills
// itself in the background from the first take on; a sandbox with a
// root filesystem of its own, or limits other than the defaults, is
// always started fresh.
type pool struct {
	p    *Provider
	size int

	mu      sync.Mutex
	ready   []*container
	filling int
	closed  bool
	wg      sync.WaitGroup
}

// take returns a started container, or nil when none is ready.
func (pl *pool) take(rootfs string, res provider.Resources) *container {
	if rootfs != "" || res != pl.p.cfg.Defaults || pl.size <= 0 {
		return nil
	}
	pl.mu.Lock()
	var c *container
	for len(pl.ready) > 0 && c == nil {
		n := len(pl.ready) - 1
		c, pl.ready = pl.ready[n], pl.ready[:n]
		if start, err := processStart(c.pid); err != nil || start != c.pidStart {
			dead := c
			pl.wg.Go(func() { pl.discard(dead) }) // died while it waited
			c = nil
		}
	}
	pl.mu.Unlock()
	// Refill a moment later: starting a container takes the CPU that
	// the sandbox just taken needs for its first commands.
	time.AfterFunc(refillDelay, pl.refill)
	return c
}

// refillDelay is how long the pool waits after a take before refilling.
const refillDelay = 50 * time.Millisecond

func (pl *pool) refill() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for !pl.closed && len(pl.ready)+pl.filling < pl.size {
		pl.filling++
		pl.wg.Go(func() {
			c, err := pl.p.startContainer(context.Background(), "", pl.p.cfg.Defaults)
			pl.mu.Lock()
			pl.filling--
			closed := pl.closed
			if err == nil && !closed {
				pl.ready = append(pl.ready, c)
			}
			pl.mu.Unlock()
			switch {
			case err != nil:
				pl.p.log.Warn("start a warm gVisor container", "err", err)
			case closed:
				pl.discard(c)
			}
		})
	}
}

func (pl *pool) discard(c *container) {
	c.release()
	if err := pl.p.teardown(context.Background(), c.id); err != nil {
		pl.p.log.Warn("remove a warm container", "container", c.id, "err", err)
	}
}

// close removes the containers that wait, and waits for those starting.
func (pl *pool) close() {
	pl.mu.Lock()
	pl.closed = true
	ready := pl.ready
	pl.ready = nil
	pl.mu.Unlock()
	for _, c := range ready {
		pl.discard(c)
	}
	pl.wg.Wait()
}
