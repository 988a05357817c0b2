package linux

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/provider/internal/hostproc"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/provider/internal/warmpool"
)

// newPool makes the pool of warm daemons, ready so that creating a
// sandbox does not wait for a process to start, enter its namespaces,
// move into its cgroups, format its workspace and build its root. It
// fills itself in the background from the first take on.
func (p *Provider) newPool() *warmpool.Pool[*warm] {
	return &warmpool.Pool[*warm]{
		Size: p.cfg.Pool,
		Start: func(ctx context.Context) (*warm, error) {
			return p.startWarm(ctx, "", p.cfg.Defaults.Memory, p.cfg.Defaults.Disk)
		},
		Alive:   func(w *warm) bool { return hostproc.Alive(w.cmd.Process.Pid, w.pidStart) },
		Discard: (*warm).kill,
		Log:     p.log,
		What:    "a warm sandbox daemon",
	}
}

// takeWarm returns a warm daemon, or nil when none is ready. A sandbox
// with a root filesystem of its own, or a workspace of other than the
// default size, is always started fresh.
func (p *Provider) takeWarm(rootfs string, disk int64) *warm {
	if rootfs != "" || disk != p.cfg.Defaults.Disk {
		return nil
	}
	w, _ := p.pool.Take()
	return w
}

// sweepWarm removes what the warm daemons of processes that died left:
// state directories and empty cgroups. It leaves anything recent alone,
// which another process may be starting right now.
func (p *Provider) sweepWarm() {
	for _, e := range records.Stale(filepath.Join(p.cfg.StateDir, warmDir), time.Minute) {
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
