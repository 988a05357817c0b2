package linux

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/netns"
)

// networkDir, in the state directory, records the sandboxes' network
// slots (see package netns).
const networkDir = ".network"

var _ provider.NetworkUpdater = (*sandbox)(nil)

// Egress is the egress proxy's registration, as *egress.Proxy offers it.
type Egress = hostnet.Egress

// Credential is a header the egress proxy adds to a sandbox's requests
// to a host: the sandbox uses the secret and never holds it. The host
// configures credentials (NetworkConfig.Credentials); no spec, and so
// no workflow history, carries one.
type Credential = hostnet.Credential

// openNetwork opens the network manager and sweeps what sandboxes that
// are gone left of their networks: a process that crashed before
// destroying them.
func (p *Provider) openNetwork() (*netns.Manager, error) {
	m, err := netns.New(p.cfg.Network.Manager(filepath.Join(p.cfg.StateDir, networkDir), p.log))
	if err != nil {
		return nil, err
	}
	if err := m.Sweep(context.Background(), p.alive); err != nil {
		p.log.Warn("sweep networks of sandboxes that are gone", "err", err)
	}
	return m, nil
}

// alive says whether the sandbox id exists and its daemon lives.
func (p *Provider) alive(id string) bool {
	rec, err := readRecord(filepath.Join(p.cfg.StateDir, id), id)
	return err == nil && rec.alive()
}

// SweepNetworks removes the networks of sandboxes whose daemons are
// gone (killed, or lost with the host's processes), which Destroy would
// otherwise remove. New does it once.
func (p *Provider) SweepNetworks(ctx context.Context) error {
	if p.net == nil {
		return nil
	}
	return p.net.Sweep(ctx, p.alive)
}

// UpdateNetwork implements provider.NetworkUpdater: the sandbox's rules
// become n's at once. A sandbox without a network gets one, and
// NetworkNone takes it away.
func (s *sandbox) UpdateNetwork(ctx context.Context, n provider.Network) error {
	if err := n.Validate(); err != nil {
		return err
	}
	unlock, err := lock(s.p.cfg.StateDir, s.rec.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.exists(); err != nil {
		return err
	}
	if s.p.net == nil {
		if n.Mode == provider.NetworkNone {
			return nil
		}
		return fmt.Errorf("%w: the linux provider offers no network beyond loopback here (Config.Network)", errdefs.ErrUnsupported)
	}
	if !s.rec.alive() {
		return s.lost()
	}
	_, err = s.p.net.Link(s.rec.ID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		if n.Mode == provider.NetworkNone {
			return nil
		}
		_, err = s.p.net.Attach(ctx, s.rec.ID, "", s.rec.PID, n)
		return err
	case err != nil:
		return err
	case n.Mode == provider.NetworkNone:
		return s.p.net.Detach(ctx, s.rec.ID)
	default:
		return s.p.net.Update(ctx, s.rec.ID, n)
	}
}

// sandboxEnv is a sandbox's environment: spec's over the defaults, and
// cabundle.Env under spec's when the sandboxes trust the proxy's
// authority (NetworkConfig.TrustEnv).
func (p *Provider) sandboxEnv(spec map[string]string) map[string]string {
	return p.cfg.Network.TrustEnv(env(spec), spec)
}
