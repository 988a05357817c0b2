package linux

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// pool keeps warm daemons ready, so that creating a sandbox does not wait
// for a process to start, enter its namespaces, move into its cgroups,
// format its workspace and build its root. It fills itself in the
// background from the first take on; a sandbox with a root filesystem of
// its own, or a workspace of other than the default size, is always
// started fresh.
type pool struct {
	p    *Provider
	size int

	mu      sync.Mutex
	ready   []*warm
	filling int // daemons being started
	closed  bool
	wg      sync.WaitGroup
}

// take returns a warm daemon, or nil when none is ready.
func (pl *pool) take(rootfs string, disk int64) *warm {
	if rootfs != "" || disk != pl.p.cfg.Defaults.Disk || pl.size <= 0 {
		return nil
	}
	pl.mu.Lock()
	var w *warm
	for len(pl.ready) > 0 && w == nil {
		n := len(pl.ready) - 1
		w, pl.ready = pl.ready[n], pl.ready[:n]
		if start, err := processStart(w.cmd.Process.Pid); err != nil || start != w.pidStart {
			go w.kill() // died while it waited
			w = nil
		}
	}
	pl.mu.Unlock()
	// Refill a moment later: starting a daemon takes a core for a few
	// milliseconds, which the sandbox just taken needs for its first
	// commands.
	time.AfterFunc(refillDelay, pl.refill)
	return w
}

// refillDelay is how long the pool waits after a take before refilling.
const refillDelay = 50 * time.Millisecond

// refill starts daemons until the pool is full.
func (pl *pool) refill() {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for !pl.closed && len(pl.ready)+pl.filling < pl.size {
		pl.filling++
		pl.wg.Go(func() {
			w, err := pl.p.startWarm(context.Background(), "", pl.p.cfg.Defaults.Memory, pl.p.cfg.Defaults.Disk)
			pl.mu.Lock()
			pl.filling--
			closed := pl.closed
			if err == nil && !closed {
				pl.ready = append(pl.ready, w)
			}
			pl.mu.Unlock()
			switch {
			case err != nil:
				pl.p.log.Warn("start a warm sandbox daemon", "err", err)
			case closed:
				w.kill()
			}
		})
	}
}

// close kills the daemons that wait, and waits for those starting.
func (pl *pool) close() {
	pl.mu.Lock()
	pl.closed = true
	ready := pl.ready
	pl.ready = nil
	pl.mu.Unlock()
	for _, w := range ready {
		w.kill()
	}
	pl.wg.Wait()
}

// sweepWarm removes what the warm daemons of processes that died left:
// state directories and empty cgroups. It leaves anything recent alone,
// which another process may be starting right now.
func (p *Provider) sweepWarm() {
	const age = time.Minute
	entries, _ := os.ReadDir(filepath.Join(p.cfg.StateDir, warmDir))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < age {
			continue
		}
		paths, err := pathsFor(e.Name())
		if err != nil {
			continue
		}
		if cg, err := loadCgroup(paths); err == nil {
			if pids, err := cg.pids(); err != nil || len(pids) > 0 {
				continue // still in use
			}
			if err := cg.destroy(context.Background()); err != nil {
				p.log.Debug("sweep warm cgroup", "name", e.Name(), "err", err)
				continue
			}
		}
		os.RemoveAll(filepath.Join(p.cfg.StateDir, warmDir, e.Name()))
	}
}
