package remote

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandboxd"
)

// sandbox is a handle on one sandbox: its machine, and the daemon in it.
type sandbox struct {
	// Served gives commands, files and archives to the daemon.
	sandboxd.Served
	p  *Provider
	id string
	mc *machine
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

// handle returns a handle on sandbox id, served by machine m.
func (p *Provider) handle(ctx context.Context, id string, m Machine) (*sandbox, error) {
	mc := p.machineFor(id, m)
	c, err := p.client(ctx, mc)
	if err != nil {
		return nil, err
	}
	s := &sandbox{p: p, id: id, mc: mc}
	s.Served = sandboxd.Served{Client: c, Ready: s.ready, Check: s.check}
	return s, nil
}

func (s *sandbox) ID() string { return s.id }

// Machine is the machine that serves the sandbox, as the provider last
// saw it.
func (s *sandbox) Machine() Machine { return s.mc.snapshot() }

// ready answers, without asking the service, for a sandbox this
// provider destroyed or paused with the service's own pause (whose
// machine's port may not answer at all). The daemon answers for the rest.
func (s *sandbox) ready() error {
	s.mc.mu.Lock()
	defer s.mc.mu.Unlock()
	switch {
	case s.mc.destroyed:
		return fmt.Errorf("%w: sandbox %s", errdefs.ErrNotFound, s.id)
	case s.mc.paused:
		return fmt.Errorf("%w: %s; resume it first", errdefs.ErrSandboxPaused, s.id)
	}
	return nil
}

// checkTimeout bounds what check asks the service and the daemon.
const checkTimeout = 10 * time.Second

// check turns a failure to reach the daemon into what became of the
// sandbox, as the service tells: gone, paused, or lost. Errors the
// daemon reported, and the caller's cancellation, pass through.
func (s *sandbox) check(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// A transport's failure is one to reach the daemon, whatever kind
	// the service's transport gave it (a machine it no longer knows).
	var ue *url.Error
	if errdefs.KindOf(err) != errdefs.Internal && !errors.As(err, &ue) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if why := s.gone(ctx); why != nil {
		return why
	}
	return err
}

// gone says why the daemon cannot serve, or nil if it can: the machine
// is gone or not running, or it runs but its daemon does not answer.
func (s *sandbox) gone(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	m, err := s.p.api.Find(ctx, s.mc.name)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return fmt.Errorf("%w: %s: its machine is gone", errdefs.ErrSandboxLost, s.id)
	case err != nil:
		return nil // the service cannot tell: the daemon's error says more
	case m.State == MachinePaused:
		return fmt.Errorf("%w: %s; resume it first", errdefs.ErrSandboxPaused, s.id)
	case m.State != MachineRunning:
		return fmt.Errorf("%w: %s: its machine is %s", errdefs.ErrSandboxLost, s.id, m.State)
	}
	if s.healthy(ctx, 3*time.Second) != nil {
		return fmt.Errorf("%w: %s: its daemon does not answer", errdefs.ErrSandboxLost, s.id)
	}
	return nil
}

// healthy asks the daemon whether it serves, waiting at most d.
func (s *sandbox) healthy(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := s.Client.Health(ctx)
	return err
}

// waitReady waits, at most d, for a daemon just started to answer.
func (s *sandbox) waitReady(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for {
		err := s.healthy(ctx, min(2*time.Second, time.Until(deadline)))
		if err == nil {
			return nil
		}
		if errdefs.KindOf(err) != errdefs.Internal {
			return err // refused: the token, say
		}
		last = err
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s: the daemon did not answer within %v: %v", errdefs.ErrProviderUnavailable, s.id, d, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Info implements provider.Sandbox: the service says whether the
// machine is there, and the daemon whether it serves.
func (s *sandbox) Info(ctx context.Context) (provider.Info, error) {
	if err := s.exists(); err != nil {
		return provider.Info{}, err
	}
	m, err := s.p.api.Find(ctx, s.mc.name)
	if err != nil {
		return provider.Info{}, err
	}
	s.mc.mu.Lock()
	if s.mc.m.ID == m.ID {
		s.mc.m = m
	}
	s.mc.mu.Unlock()
	info := s.p.info(s.id, m)
	switch m.State {
	case MachinePaused:
		info.State = provider.StatePaused
		return info, nil
	case MachineRunning:
	default:
		info.State = provider.StateLost
		return info, nil
	}
	info.State = s.daemonState(ctx)
	return info, nil
}

// daemonState is the state of a sandbox whose machine runs, as its
// daemon says.
func (s *sandbox) daemonState(ctx context.Context) provider.State {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := s.Client.Health(ctx)
	switch {
	case err != nil:
		return provider.StateLost
	case h.Paused:
		return provider.StatePaused
	}
	return provider.StateRunning
}

// Pause implements provider.Pauser: through the service's own pause
// when the API has one, else the daemon stops every process of the
// sandbox but itself.
func (s *sandbox) Pause(ctx context.Context) error {
	if err := s.exists(); err != nil {
		return err
	}
	if s.p.pauser == nil {
		return s.check(s.Client.Pause(ctx))
	}
	s.mc.mu.Lock()
	defer s.mc.mu.Unlock()
	if err := s.p.pauser.Pause(ctx, s.mc.m); err != nil {
		return err
	}
	s.mc.paused = true
	return nil
}

// Resume implements provider.Pauser.
func (s *sandbox) Resume(ctx context.Context) error {
	if err := s.exists(); err != nil {
		return err
	}
	if s.p.pauser == nil {
		return s.check(s.Client.Resume(ctx))
	}
	s.mc.mu.Lock()
	defer s.mc.mu.Unlock()
	if err := s.p.pauser.Resume(ctx, s.mc.m); err != nil {
		return err
	}
	s.mc.paused = false
	return nil
}

// exists reports ErrNotFound once this provider has destroyed the
// sandbox.
func (s *sandbox) exists() error {
	s.mc.mu.Lock()
	defer s.mc.mu.Unlock()
	if s.mc.destroyed {
		return fmt.Errorf("%w: sandbox %s", errdefs.ErrNotFound, s.id)
	}
	return nil
}

// Renew implements provider.Leaser: contact with the daemon, and, when
// the service would end the machine before the sandbox's lifetime, a
// KeepAlive now and then.
func (s *sandbox) Renew(ctx context.Context) error {
	if err := s.ready(); err != nil {
		return err
	}
	if err := s.check(s.Client.Renew(ctx)); err != nil {
		return err
	}
	return s.keepAlive(ctx)
}

// keepAliveMargin: a machine the service ends sooner than this is kept
// alive, for keepAliveStep more, by the next Renew.
const (
	keepAliveMargin = 10 * time.Minute
	keepAliveStep   = time.Hour
)

func (s *sandbox) keepAlive(ctx context.Context) error {
	s.mc.mu.Lock()
	m := s.mc.m
	s.mc.mu.Unlock()
	if m.ExpiresAt.IsZero() || time.Until(m.ExpiresAt) > keepAliveMargin {
		return nil
	}
	end := expiresAt(m, lifetimeOf(m))
	if !m.ExpiresAt.Before(end) {
		return nil // the sandbox ends with the machine
	}
	d := min(keepAliveStep, time.Until(end))
	if d <= 0 {
		return nil
	}
	if err := s.p.api.KeepAlive(ctx, m, d); err != nil {
		return err
	}
	s.mc.mu.Lock()
	if s.mc.m.ID == m.ID {
		s.mc.m.ExpiresAt = time.Now().Add(d)
	}
	s.mc.mu.Unlock()
	return nil
}

// Destroy implements provider.Sandbox: the service deletes the machine
// and all it held.
func (s *sandbox) Destroy(ctx context.Context) error {
	m := s.mc.snapshot()
	if err := s.p.api.Delete(ctx, m); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	s.p.forget(s.id)
	s.mc.mu.Lock()
	s.mc.destroyed = true
	s.mc.mu.Unlock()
	return nil
}
