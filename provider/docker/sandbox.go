package docker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/berth-dev/berth/errdefs"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

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

// Info implements provider.Sandbox. It asks Docker nothing: the
// container's freezer says whether it runs, is paused, or is gone.
func (s *sandbox) Info(ctx context.Context) (provider.Info, error) {
	if err := s.exists(); err != nil {
		return provider.Info{}, err
	}
	info := s.rec.info()
	info.State = provider.StateRunning
	if fz, err := frozen(s.rec.Freezer); err != nil {
		info.State = provider.StateLost
	} else if fz || s.paused() {
		info.State = provider.StatePaused
	} else if !s.running(ctx) {
		info.State = provider.StateLost
	}
	return info, nil
}

// running asks Docker whether the container runs: its freezer may
// outlive its processes for a moment.
func (s *sandbox) running(ctx context.Context) bool {
	insp, err := s.p.docker.ContainerInspect(ctx, s.rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		return !cerrdefs.IsNotFound(err)
	}
	return insp.Container.State.Running
}

// ready checks, before talking to the daemon, that it can answer: a
// paused daemon would leave the caller waiting.
func (s *sandbox) ready() error {
	if err := s.exists(); err != nil {
		return err
	}
	fz, err := frozen(s.rec.Freezer)
	if err != nil {
		return s.lost()
	}
	if fz || s.paused() {
		return fmt.Errorf("%w: %s; resume it first", errdefs.ErrSandboxPaused, s.rec.ID)
	}
	return nil
}

// paused reports whether Pause has stopped the sandbox.
func (s *sandbox) paused() bool { return daemonpause.Paused(s.p.pausedPath(s.rec.ID)) }

// exists reports ErrNotFound once the sandbox has been destroyed, through
// this handle or any other.
func (s *sandbox) exists() error {
	return records.Exists(s.p.recordPath(s.rec.ID), s.rec.ID)
}

func (s *sandbox) lost() error {
	return fmt.Errorf("%w: %s: its container is gone", errdefs.ErrSandboxLost, s.rec.ID)
}

// check turns a failure to reach the daemon into ErrLost when the
// container has stopped; typed errors from the daemon pass through.
func (s *sandbox) check(err error) error {
	return lost.Check(err, s.lost(), s.stopped)
}

// stopped reports whether the container stops within lostGrace: a
// daemon that is killed closes its connections before Docker has seen
// its container stop.
func (s *sandbox) stopped() bool {
	ctx, cancel := context.WithTimeout(context.Background(), lostGrace)
	defer cancel()
	for {
		if !s.running(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lostGrace is how long a container whose daemon's connection broke may
// take to be seen stopped before the sandbox is taken to be alive.
const lostGrace = 2 * time.Second

// Pause implements provider.Pauser: the daemon stops every other
// process, keeping their memory, and itself still ends the sandbox at
// its lifetime (see daemonpause). Docker's own pause would freeze the
// daemon too.
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
	fz, err := frozen(s.rec.Freezer)
	if err != nil {
		return s.lost()
	}
	if fz {
		// Paused by Docker (by an earlier berth, or by hand): the
		// daemon's stop holds it instead.
		if _, err := s.p.docker.ContainerUnpause(ctx, s.rec.Container, client.ContainerUnpauseOptions{}); err != nil {
			return fmt.Errorf("resume %s: %v", s.rec.ID, oneLine(err))
		}
	}
	return daemonpause.Set(ctx, s.client, s.p.pausedPath(s.rec.ID), pause, s.check)
}

// Renew implements provider.Leaser.
func (s *sandbox) Renew(ctx context.Context) error {
	if err := s.exists(); err != nil {
		return err
	}
	return s.check(s.client.Renew(ctx))
}

// Destroy implements provider.Sandbox: it removes the container, its
// workspace's mount and image, its slot, and last its record, so that a
// Destroy cut short is finished by the next.
func (s *sandbox) Destroy(ctx context.Context) error {
	unlock, err := s.p.lock(s.rec.ID)
	if err != nil {
		return err
	}
	defer unlock()
	rec, err := s.p.readRecord(s.rec.ID)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.destroy(ctx, rec)
}

// destroy removes a sandbox; the caller holds its lock.
func (s *sandbox) destroy(ctx context.Context, rec *record) error {
	s.p.clients.Forget(rec.ID)
	if s.p.net != nil {
		if err := s.p.net.Detach(ctx, rec.ID); err != nil {
			return fmt.Errorf("destroy %s: %w", rec.ID, err)
		}
	}
	if err := s.p.removeSlot(ctx, rec.Container, rec.UID); err != nil {
		return fmt.Errorf("destroy %s: %w", rec.ID, err)
	}
	if err := os.Remove(s.p.pausedPath(rec.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("destroy %s: %w", rec.ID, err)
	}
	if err := os.Remove(s.p.recordPath(rec.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("destroy %s: %w", rec.ID, err)
	}
	return nil
}
