package gvisor

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

func (s *sandbox) dir() string { return s.p.containerDir(s.rec.Container) }

func (s *sandbox) paused() bool { return daemonpause.Paused(filepath.Join(s.dir(), pausedFile)) }

// Info implements provider.Sandbox.
func (s *sandbox) Info(ctx context.Context) (provider.Info, error) {
	if err := s.exists(); err != nil {
		return provider.Info{}, err
	}
	info := s.rec.info()
	switch {
	case !s.rec.alive():
		info.State = provider.StateLost
	case s.paused():
		info.State = provider.StatePaused
	default:
		info.State = provider.StateRunning
	}
	return info, nil
}

// exists reports ErrNotFound once the sandbox has been destroyed, through
// this handle or any other.
func (s *sandbox) exists() error {
	return records.Exists(s.p.recordPath(s.rec.ID), s.rec.ID)
}

// ready checks, before talking to the daemon, that it can answer: a
// paused daemon would leave the caller waiting.
func (s *sandbox) ready() error {
	if err := s.exists(); err != nil {
		return err
	}
	if s.paused() {
		return fmt.Errorf("%w: %s; resume it first", errdefs.ErrSandboxPaused, s.rec.ID)
	}
	return nil
}

func (s *sandbox) lost() error {
	return fmt.Errorf("%w: %s: its gVisor sandbox process is gone", errdefs.ErrSandboxLost, s.rec.ID)
}

// check turns a failure to reach the daemon into ErrLost when the
// sandbox's process is gone; typed errors from the daemon pass through.
func (s *sandbox) check(err error) error {
	// The daemon's connections close as the sandbox goes down: give its
	// process the moment it takes to exit.
	return lost.Check(err, s.lost(), func() bool { return s.rec.exitsWithin(lostGrace) })
}

// lostGrace is how long a sandbox whose connection broke may take to
// exit before it is taken to be alive after all.
const lostGrace = 500 * time.Millisecond

// Pause implements provider.Pauser: the daemon stops every other task
// of the sandbox, keeping their memory, and itself still ends the
// sandbox at its lifetime (see daemonpause), which runsc pause, freezing
// the daemon too, would prevent.
func (s *sandbox) Pause(ctx context.Context) error { return s.setPaused(ctx, true) }

// Resume implements provider.Pauser.
func (s *sandbox) Resume(ctx context.Context) error { return s.setPaused(ctx, false) }

func (s *sandbox) setPaused(ctx context.Context, pause bool) error {
	unlock, err := s.p.lock(s.rec.ID)
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
	return daemonpause.Set(ctx, s.client, filepath.Join(s.dir(), pausedFile), pause, s.check)
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
	unlock, err := s.p.lock(s.rec.ID)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := s.p.readRecord(s.rec.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		// Gone already, or its destruction was cut short after the
		// record went: finish the container's.
		return s.p.teardown(ctx, s.rec.Container)
	} else if err != nil {
		return err
	}
	return s.p.remove(ctx, rec)
}
