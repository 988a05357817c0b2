package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// Registrar is the egress proxy, as a Manager sees it: the proxy knows a
// sandbox by the source address of its connections, so it must be told
// which sandbox, under which policy, each address is.
type Registrar interface {
	// Register admits src's connections as sandbox id's under policy
	// until unregister is called. A source registered already is
	// refused with errdefs.ErrAlreadyExists.
	Register(src netip.Addr, id string, policy provider.Network) (unregister func(), err error)
}

// registration is one address the Manager registered with the proxy.
type registration struct {
	id         string
	policy     provider.Network
	unregister func()
}

// register tells the proxy that addr is sandbox id's under policy, in
// place of what it was told of addr before. Only NetworkAllow sends
// connections to the proxy; a policy of another mode leaves addr
// unregistered. A Manager without Config.Proxy registers nothing.
func (m *Manager) register(id string, addr netip.Addr, policy provider.Network) error {
	if m.cfg.Proxy == nil {
		return nil
	}
	m.regMu.Lock()
	defer m.regMu.Unlock()
	old, had := m.regs[addr]
	if had && old.id == id && samePolicy(old.policy, policy) {
		return nil
	}
	if had {
		// The proxy refuses a second registration of a source: the old
		// one goes first (and with it the connections it admitted, which
		// the new policy may not allow).
		old.unregister()
		delete(m.regs, addr)
	}
	if policy.Mode != provider.NetworkAllow {
		return nil
	}
	undo, err := m.cfg.Proxy.Register(addr, id, policy)
	if err != nil {
		if had && old.id == id && old.policy.Mode == provider.NetworkAllow {
			if u, rerr := m.cfg.Proxy.Register(addr, id, old.policy); rerr == nil {
				m.regs[addr] = registration{id: id, policy: old.policy, unregister: u}
			}
		}
		return fmt.Errorf("register %s with the egress proxy: %w", addr, err)
	}
	m.regs[addr] = registration{id: id, policy: policy, unregister: undo}
	return nil
}

// unregister tells the proxy to forget addr, if this Manager told it of
// addr.
func (m *Manager) unregister(addr netip.Addr) {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	if r, ok := m.regs[addr]; ok {
		r.unregister()
		delete(m.regs, addr)
	}
}

// unregisterAll forgets every address this Manager registered.
func (m *Manager) unregisterAll() {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	for addr, r := range m.regs {
		r.unregister()
		delete(m.regs, addr)
	}
}

// Reregister tells the proxy again of every sandbox the state files
// record under NetworkAllow: a proxy keeps its registrations in memory,
// and a host process that restarts finds its sandboxes' links still in
// place but a proxy that knows none of them. New does it once; Sweep
// does it for the sandboxes it keeps. A source the proxy has from
// another Manager already is left to that Manager.
func (m *Manager) Reregister(ctx context.Context) error {
	recs, err := m.records()
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	var errs []error
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if rec.ID == "" {
			continue
		}
		errs = append(errs, m.reregister(rec))
	}
	return errors.Join(errs...)
}

func (m *Manager) reregister(rec *record) error {
	_, addr := m.addrs(rec.Slot)
	err := m.register(rec.ID, addr, rec.Policy)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		m.log.Debug("network: the egress proxy has this sandbox from elsewhere", "sandbox", rec.ID, "addr", addr.String())
		return nil
	}
	return err
}

func samePolicy(a, b provider.Network) bool {
	return a.Mode == b.Mode && slices.Equal(a.Hosts, b.Hosts) && slices.Equal(a.CIDRs, b.CIDRs) && slices.Equal(a.Ports, b.Ports)
}
