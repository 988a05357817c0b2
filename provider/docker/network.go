package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/netns"
)

// networkDir, in the state directory, records the sandboxes' network
// slots (see package netns); resolvConf, in each slot directory, is the
// container's /etc/resolv.conf when networks are policed.
const (
	networkDir = ".network"
	resolvConf = "resolv.conf"
)

var _ provider.NetworkUpdater = (*sandbox)(nil)

// Egress is the egress proxy's registration, as *egress.Proxy offers it.
type Egress = hostnet.Egress

// Credential is a header the egress proxy adds to a sandbox's requests
// to a host: the sandbox uses the secret and never holds it.
type Credential = hostnet.Credential

// openNetwork opens the network manager and sweeps what sandboxes that
// are gone left of their networks.
func (p *Provider) openNetwork(ctx context.Context) (*netns.Manager, error) {
	m, err := netns.New(p.cfg.Network.Manager(filepath.Join(p.cfg.StateDir, networkDir), p.log))
	if err != nil {
		return nil, err
	}
	p.net = m
	if err := p.SweepNetworks(ctx); err != nil {
		p.log.Warn("sweep networks of sandboxes that are gone", "err", err)
	}
	return m, nil
}

// SweepNetworks removes the tables and slots of sandboxes whose
// containers are gone or stopped (killed, or lost with the engine),
// which Destroy would otherwise remove; their veths went with their
// containers' namespaces. New does it once.
func (p *Provider) SweepNetworks(ctx context.Context) error {
	if p.net == nil {
		return nil
	}
	return p.net.Sweep(ctx, func(id string) bool { return p.alive(ctx, id) })
}

// alive says whether the sandbox id exists and its container runs. A
// sandbox being created has its record before its link, and one being
// destroyed loses its link before its container: a sweep never takes
// a link from under either.
func (p *Provider) alive(ctx context.Context, id string) bool {
	rec, err := p.readRecord(id)
	if err != nil {
		return false
	}
	insp, err := p.docker.ContainerInspect(ctx, rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		// An engine that does not answer proves nothing: keep it.
		return !cerrdefs.IsNotFound(err)
	}
	return insp.Container.State.Running
}

// attach gives a sandbox's running container its network.
func (p *Provider) attach(ctx context.Context, rec *record, policy provider.Network) error {
	ns, err := p.containerNetns(ctx, rec)
	if err != nil {
		return err
	}
	defer ns.Close()
	// The namespace is named by this process's descriptor of it, which
	// holds it: a pid the container's init no longer has cannot send
	// the veth into another process's namespace.
	_, err = p.net.Attach(ctx, rec.ID, "/proc/self/fd/"+strconv.Itoa(int(ns.Fd())), 0, policy)
	return err
}

// containerNetns opens the network namespace of a sandbox's container,
// that of its first process as Docker names it, checked to be still
// the container's (its cgroup is the container's own).
func (p *Provider) containerNetns(ctx context.Context, rec *record) (*os.File, error) {
	insp, err := p.docker.ContainerInspect(ctx, rec.Container, client.ContainerInspectOptions{})
	if err != nil {
		return nil, fmt.Errorf("inspect container: %v", oneLine(err))
	}
	st := insp.Container.State
	if !st.Running || st.Pid <= 0 {
		return nil, fmt.Errorf("%w: %s: its container is not running", errdefs.ErrSandboxLost, rec.ID)
	}
	f, err := os.Open("/proc/" + strconv.Itoa(st.Pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("%w: %s: its container's network namespace: %v", errdefs.ErrSandboxLost, rec.ID, err)
	}
	if fz, err := freezerFile(st.Pid); err != nil || fz != rec.Freezer {
		f.Close()
		return nil, fmt.Errorf("%w: %s: its container's first process is gone", errdefs.ErrSandboxLost, rec.ID)
	}
	return f, nil
}

// UpdateNetwork implements provider.NetworkUpdater: the sandbox's rules
// become n's at once. A sandbox without a network gets one, and
// NetworkNone takes it away. Without Config.Network, a sandbox's
// network does not change.
func (s *sandbox) UpdateNetwork(ctx context.Context, n provider.Network) error {
	if err := n.Validate(); err != nil {
		return err
	}
	unlock, err := s.p.lock(s.rec.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.exists(); err != nil {
		return err
	}
	if s.p.net == nil {
		insp, err := s.p.docker.ContainerInspect(ctx, s.rec.Container, client.ContainerInspectOptions{})
		if err == nil && n.Mode == provider.NetworkNone && insp.Container.HostConfig != nil && insp.Container.HostConfig.NetworkMode.IsNone() {
			return nil
		}
		return fmt.Errorf("%w: the docker provider changes sandboxes' networks only with Config.Network", errdefs.ErrUnsupported)
	}
	_, err = s.p.net.Link(s.rec.ID)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		if n.Mode == provider.NetworkNone {
			return nil
		}
		return s.p.attach(ctx, s.rec, n)
	case err != nil:
		return err
	case n.Mode == provider.NetworkNone:
		return s.p.net.Detach(ctx, s.rec.ID)
	default:
		return s.p.net.Update(ctx, s.rec.ID, n)
	}
}
