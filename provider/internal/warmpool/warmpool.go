// Package warmpool keeps started, unclaimed sandboxes ready, so that
// creating a sandbox is a claim rather than a start. A pool fills itself
// in the background from the first take on.
package warmpool

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Pool keeps up to Size warm W ready. Its exported fields are set before
// the first use.
type Pool[W any] struct {
	// Size is how many to keep; zero or less keeps none.
	Size int
	// Start starts one.
	Start func(ctx context.Context) (W, error)
	// Alive reports whether one that waited still serves.
	Alive func(W) bool
	// Discard stops and removes one that is not taken.
	Discard func(W)
	// Log receives the failures of Start, as "start "+What.
	Log  *slog.Logger
	What string

	mu      sync.Mutex
	ready   []W
	filling int // being started
	closed  bool
	wg      sync.WaitGroup
}

// RefillDelay is how long the pool waits after a take before refilling:
// starting one takes a core for a moment, which the sandbox just taken
// needs for its first commands.
const RefillDelay = 50 * time.Millisecond

// Take returns a warm one, or false when none is ready.
func (pl *Pool[W]) Take() (W, bool) {
	var w W
	if pl.Size <= 0 {
		return w, false
	}
	pl.mu.Lock()
	found := false
	for len(pl.ready) > 0 && !found {
		n := len(pl.ready) - 1
		w, pl.ready = pl.ready[n], pl.ready[:n]
		if found = pl.Alive(w); !found {
			dead := w
			pl.wg.Go(func() { pl.Discard(dead) }) // died while it waited
		}
	}
	pl.mu.Unlock()
	time.AfterFunc(RefillDelay, pl.Refill)
	if !found {
		var zero W
		return zero, false
	}
	return w, true
}

// Refill starts warm ones until the pool, counting those starting, is
// full.
func (pl *Pool[W]) Refill() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for !pl.closed && len(pl.ready)+pl.filling < pl.Size {
		pl.filling++
		pl.wg.Go(func() {
			w, err := pl.Start(context.Background())
			pl.mu.Lock()
			pl.filling--
			closed := pl.closed
			if err == nil && !closed {
				pl.ready = append(pl.ready, w)
			}
			pl.mu.Unlock()
			switch {
			case err != nil:
				pl.Log.Warn("start "+pl.What, "err", err)
			case closed:
				pl.Discard(w)
			}
		})
	}
}

// Counts says how many are ready and how many are starting.
func (pl *Pool[W]) Counts() (ready, filling int) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return len(pl.ready), pl.filling
}

// Close discards the warm ones that wait, and waits for those starting.
func (pl *Pool[W]) Close() {
	pl.mu.Lock()
	pl.closed = true
	ready := pl.ready
	pl.ready = nil
	pl.mu.Unlock()
	for _, w := range ready {
		pl.Discard(w)
	}
	pl.wg.Wait()
}
