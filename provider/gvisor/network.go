package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"

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
// to a host: the sandbox uses the secret and never holds it.
type Credential = hostnet.Credential

// openNetwork opens the network manager and sweeps what sandboxes that
// are gone left of their networks.
func (p *Provider) openNetwork() error {
	m, err := netns.New(p.cfg.Network.Manager(filepath.Join(p.cfg.StateDir, networkDir), p.log))
	if err != nil {
		return err
	}
	p.net = m
	if err := p.SweepNetworks(context.Background()); err != nil {
		p.log.Warn("sweep networks of sandboxes that are gone", "err", err)
	}
	return nil
}

// SweepNetworks removes the tables and slots of sandboxes whose gVisor
// sandbox processes are gone (killed, or lost with the host's
// processes), which Destroy would otherwise remove; their veths went
// with their namespaces. New does it once.
func (p *Provider) SweepNetworks(ctx context.Context) error {
	if p.net == nil {
		return nil
	}
	return p.net.Sweep(ctx, p.alive)
}

// alive says whether the sandbox id exists and its sandbox process
// lives. A sandbox is attached before it has a record, under its lock:
// one without a live record is looked at again under the lock, once
// its creation (or destruction) is over.
func (p *Provider) alive(id string) bool {
	if rec, err := p.readRecord(id); err == nil && rec.alive() {
		return true
	}
	unlock, err := p.lock(id)
	if err != nil {
		return true // nothing is proved
	}
	defer unlock()
	rec, err := p.readRecord(id)
	return err == nil && rec.alive()
}

// netPlan is the network a container starts with.
type netPlan struct {
	id     string // the sandbox's
	policy provider.Network
}

// newNetns makes a network namespace, with nothing in it but a
// loopback interface that is down, held by the file returned: gVisor's
// network stack takes the interfaces it finds there as runsc starts the
// sandbox, so the sandbox's veth must be in it first. Once the sandbox
// process has joined it, the file may be closed: the namespace, and
// the veth with it, lives as long as the sandbox.
func newNetns() (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	c := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, in the new namespace, ends with
		// the goroutine rather than serve another.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			c <- result{err: fmt.Errorf("new network namespace: %w", err)}
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		c <- result{f, err}
	}()
	r := <-c
	return r.f, r.err
}

// netnsPath names an open namespace for another process (runsc) as for
// this one.
func netnsPath(f *os.File) string {
	return "/proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(f.Fd()))
}

// UpdateNetwork implements provider.NetworkUpdater: the sandbox's rules
// become n's at once, and NetworkNone takes its network away. gVisor's
// network stack takes its interfaces once, as the sandbox starts: a
// sandbox started without a network (or whose network was taken away)
// cannot be given one, errdefs.ErrUnsupported.
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
		if n.Mode == provider.NetworkNone {
			return nil
		}
		return fmt.Errorf("%w: the gvisor provider offers no network beyond loopback here (Config.Network)", errdefs.ErrUnsupported)
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
		return fmt.Errorf("%w: %s started without a network, and gVisor takes a sandbox's interfaces only as it starts: create it with one", errdefs.ErrUnsupported, s.rec.ID)
	case err != nil:
		return err
	case n.Mode == provider.NetworkNone:
		return s.p.net.Detach(ctx, s.rec.ID)
	default:
		return s.p.net.Update(ctx, s.rec.ID, n)
	}
}

// attachNew makes a network namespace for plan's sandbox and attaches
// it; the caller closes the file once runsc has started the sandbox in
// it.
func (p *Provider) attachNew(ctx context.Context, plan *netPlan) (*os.File, error) {
	ns, err := newNetns()
	if err != nil {
		return nil, err
	}
	if _, err := p.net.Attach(ctx, plan.id, netnsPath(ns), 0, plan.policy); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}
