package hostworker

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// DefaultOrphanSampling is how often a host with metrics looks for
// orphaned sandboxes.
const DefaultOrphanSampling = 5 * time.Second

// orphans counts orphaned sandbox-seconds: the time the sandboxes a host
// holds spend with their owner workflow closed, until the reaper
// destroys them. Its goal is zero beyond a reaper's turn.
type orphans struct {
	c       client.Client
	every   time.Duration
	mu      sync.Mutex
	seconds float64
	closed  map[string]time.Time // owner (workflow/run) -> when it closed; closed stays closed
	seen    map[string]time.Time // orphan sandbox (provider/id) -> when last counted
}

// Seconds is the count so far.
func (o *orphans) Seconds() float64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seconds
}

// sample counts, for each sandbox of ps whose owner is closed, the time
// since it was last counted, or, the first time, since its owner closed:
// a sandbox whose owner closed while the host was down was orphaned all
// that while.
func (o *orphans) sample(ctx context.Context, ps []provider.Provider, now time.Time) error {
	held := map[string]bool{}
	for _, p := range ps {
		infos, err := p.List(ctx, nil)
		if err != nil {
			return fmt.Errorf("list %s sandboxes: %w", p.Name(), err)
		}
		for _, info := range infos {
			wf := info.Labels[sandbox.LabelWorkflowID]
			if wf == "" {
				continue
			}
			owner := wf + "/" + info.Labels[sandbox.LabelRunID]
			o.mu.Lock()
			closedAt, known := o.closed[owner]
			o.mu.Unlock()
			if !known {
				at, closed, err := activities.OwnerClosedAt(ctx, o.c, wf, info.Labels[sandbox.LabelRunID])
				if err != nil {
					return err
				}
				if !closed {
					continue
				}
				if at.IsZero() || at.After(now) {
					at = now
				}
				closedAt = at
			}
			key := p.Name() + "/" + info.ID
			held[key] = true
			o.mu.Lock()
			o.closed[owner] = closedAt
			from, counted := o.seen[key]
			if !counted {
				from = closedAt
			}
			o.seconds += math.Max(0, now.Sub(from).Seconds())
			o.seen[key] = now
			o.mu.Unlock()
		}
	}
	o.mu.Lock()
	for key := range o.seen {
		if !held[key] {
			delete(o.seen, key) // destroyed
		}
	}
	o.mu.Unlock()
	return nil
}

// countOrphans samples the host's sandboxes every o.every until the
// host closes.
func (h *Host) countOrphans(o *orphans) {
	go func() {
		tick := time.NewTicker(o.every)
		defer tick.Stop()
		for {
			if err := o.sample(h.bg, h.providers, time.Now()); err != nil && h.bg.Err() == nil {
				h.log.Debug("count orphaned sandboxes", "error", err)
			}
			select {
			case <-h.bg.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// OrphanedSeconds is berth_orphaned_sandbox_seconds_total: zero unless
// HostConfig.Metrics is set.
func (h *Host) OrphanedSeconds() float64 {
	if h.orphans == nil {
		return 0
	}
	return h.orphans.Seconds()
}

// MetricsHandler serves the host's metrics (its Telemetry's) in
// Prometheus' text format.
func (h *Host) MetricsHandler() http.Handler { return h.telemetry.Handler() }
