package linux

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/daemonpause"
	"github.com/berth-dev/berth/provider/internal/lost"
	"github.com/berth-dev/berth/provider/internal/records"
	"github.com/berth-dev/berth/sandboxd"
)

// sandbox is a handle on one sandbox of the provider.
type sandbox struct {
	// Served gives commands, files and archives to the daemon, with
	// this sandbox's ready and check.
	sandboxd.Served
	p      *Provider
	rec    *record
	client *sandboxd.Client
}

// What Capabilities announces (Pause), and the optional interfaces
// snapshots and copies use, checked by the compiler.
var (
	_ provider.Sandbox         = (*sandbox)(nil)
	_ provider.Pauser          = (*sandbox)(nil)
	_ provider.Leaser          = (*sandbox)(nil)
	_ provider.Signaler        = (*sandbox)(nil)
	_ provider.Terminal        = (*sandbox)(nil)
	_ provider.PathExporter    = (*sandbox)(nil)
	_ provider.ChangedExporter = (*sandbox)(nil)
)

func (s *sandbox) ID() string { return s.rec.ID }

// Labels are the sandbox's, as recorded.
func (s *sandbox) Labels() map[string]string { return s.rec.Labels }

// Info implements provider.Sandbox.
func (s *sandbox) Info(ctx context.Context) (provider.Info, error) {
	if err := s.exists(); err != nil {
		return provider.Info{}, err
	}
	info := s.rec.info()
	info.State = provider.StateRunning
	if !s.rec.alive() {
		info.State = provider.StateLost
	} else if cg, err := loadCgroup(s.rec.Cgroup); err != nil {
		info.State = provider.StateLost
	} else if frozen, err := cg.frozen(); (err == nil && frozen) || s.paused() {
		info.State = provider.StatePaused
	}
	return info, nil
}

// paused reports whether Pause has stopped the sandbox.
func (s *sandbox) paused() bool {
	return daemonpause.Paused(filepath.Join(s.p.cfg.StateDir, s.rec.ID, pausedFile))
}

// ready checks, before talking to the daemon, that it can answer: a
// paused daemon would leave the caller waiting.
func (s *sandbox) ready() error {
	if err := s.exists(); err != nil {
		return err
	}
	frozen, err := s.rec.Cgroup.frozen()
	if err != nil {
		return s.lost()
	}
	if frozen || s.paused() {
		return fmt.Errorf("%w: %s; resume it first", errdefs.ErrSandboxPaused, s.rec.ID)
	}
	return nil
}

// exists reports ErrNotFound once the sandbox has been destroyed, through
// this handle or any other.
func (s *sandbox) exists() error {
	return records.Exists(filepath.Join(s.p.cfg.StateDir, s.rec.ID, recordFile), s.rec.ID)
}

func (s *sandbox) lost() error {
	return fmt.Errorf("%w: %s: its daemon is gone", errdefs.ErrSandboxLost, s.rec.ID)
}

// check turns a failure to reach the daemon into ErrLost when the daemon
// is gone; typed errors from the daemon pass through.
func (s *sandbox) check(err error) error {
	// A daemon that is going closes its connections as it starts to
	// exit; as the first process of its PID namespace it finishes only
	// when every process in it has died. Give it that moment.
	return lost.Check(err, s.lost(), func() bool { return s.rec.exitsWithin(lostGrace) })
}

// lostGrace is how long a daemon whose connection broke may take to exit
// before the sandbox is taken to be alive after all.
const lostGrace = 500 * time.Millisecond

// Pause implements provider.Pauser: the daemon stops every other
// process, keeping their memory, and itself still ends the sandbox at
// its lifetime (see daemonpause).
func (s *sandbox) Pause(ctx context.Context) error { return s.setPaused(ctx, true) }

// Resume implements provider.Pauser.
func (s *sandbox) Resume(ctx context.Context) error { return s.setPaused(ctx, false) }

func (s *sandbox) setPaused(ctx context.Context, pause bool) error {
	unlock, err := lock(s.p.cfg.StateDir, s.rec.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.exists(); err != nil {
		return err
	}
	if !s.rec.alive() {
		return s.lost()
	}
	// A sandbox frozen by the cgroup freezer (by an earlier berth) is
	// thawed: the daemon's stop holds it instead.
	if cg, err := loadCgroup(s.rec.Cgroup); err == nil {
		if frozen, _ := cg.frozen(); frozen {
			_ = cg.thaw()
		}
	}
	return daemonpause.Set(ctx, s.client, filepath.Join(s.p.cfg.StateDir, s.rec.ID, pausedFile), pause, s.check)
}

// Renew implements provider.Leaser.
func (s *sandbox) Renew(ctx context.Context) error {
	if err := s.exists(); err != nil {
		return err
	}
	return s.check(s.client.Renew(ctx))
}

// Destroy implements provider.Sandbox.
func (s *sandbox) Destroy(ctx context.Context) error {
	unlock, err := lock(s.p.cfg.StateDir, s.rec.ID)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := readRecord(filepath.Join(s.p.cfg.StateDir, s.rec.ID), s.rec.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		rec = s.rec
	} else if err != nil {
		return err
	}
	return s.p.remove(ctx, s.rec.ID, rec)
}
