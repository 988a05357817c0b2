package egress

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/provider"
)

// literal returns the address a name is, if it is one.
func literal(name string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(name, "["), "]"))
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// sameName reports whether two names the sandbox gave are one.
func sameName(a, b string) bool {
	return strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
}

// forbiddenRange reports whether a lies in one of the forbidden ranges.
func (p *Proxy) forbiddenRange(a netip.Addr) bool {
	if a.IsUnspecified() { // connects to the host itself
		return true
	}
	for _, f := range p.cfg.Forbidden {
		if f.Contains(a) {
			return true
		}
	}
	return false
}

// resolvedAllowed reports whether the proxy may dial a, an address an
// allowed name resolved to: never one of the host's own, one in a
// forbidden range only by a CIDR rule.
func (p *Proxy) resolvedAllowed(sb *sandbox, a netip.Addr, port uint16) bool {
	if p.hosts.has(a) {
		return false
	}
	return !p.forbiddenRange(a) || sb.policy.AllowsAddr(a, port)
}

// literalAllowed reports whether the sandbox may reach a, an address it
// gave with no name: under an allow policy only by a CIDR rule; under
// an open one if it is in no forbidden range; never the host's own.
func (p *Proxy) literalAllowed(sb *sandbox, a netip.Addr, port uint16) bool {
	if p.hosts.has(a) {
		return false
	}
	switch sb.policy.Mode {
	case provider.NetworkAllow:
		return sb.policy.AllowsAddr(a, port)
	case provider.NetworkOpen:
		return !p.forbiddenRange(a)
	}
	return false
}

// decide checks name on port against sb's policy and returns the
// addresses the proxy may dial for it: the name's, resolved here once,
// or the literal itself.
func (p *Proxy) decide(ctx context.Context, sb *sandbox, name string, port uint16) ([]netip.Addr, *Refusal) {
	if a, ok := literal(name); ok {
		if !p.literalAllowed(sb, a, port) {
			return nil, refused(ReasonNoName, name)
		}
		return []netip.Addr{a}, nil
	}
	if !sb.policy.AllowsHost(name, port) {
		return nil, refused(ReasonHostNotAllowed, name)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip", name)
	if err != nil || len(addrs) == 0 {
		return nil, refused(ReasonResolve, name)
	}
	var ok []netip.Addr
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if p.resolvedAllowed(sb, a, port) {
			ok = append(ok, a)
			if len(ok) == maxAddrs {
				break
			}
		}
	}
	if len(ok) == 0 {
		return nil, refused(ReasonAddrForbidden, name)
	}
	return ok, nil
}

// dial dials the first of addrs on port that answers.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port uint16, name string) (net.Conn, *Refusal) {
	for _, a := range addrs {
		dctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
		c, err := p.cfg.Dial(dctx, "tcp", netip.AddrPortFrom(a, port).String())
		cancel()
		if err == nil {
			return c, nil
		}
		p.log.Debug("egress: dial failed", "name", truncate(name), "addr", a.String(), "err", err)
	}
	return nil, refused(ReasonDial, name)
}

// dialChecked decides and dials hostport for sb: the dialer of the
// sandbox's HTTP transport, so that every upstream connection it opens
// is checked as a relayed one is.
func (p *Proxy) dialChecked(ctx context.Context, sb *sandbox, hostport string) (net.Conn, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, refused(ReasonBadRequest, hostport)
	}
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return nil, refused(ReasonBadRequest, hostport)
	}
	addrs, r := p.decide(ctx, sb, host, uint16(port))
	if r != nil {
		p.refuse(sb, r)
		return nil, r
	}
	c, r := p.dial(ctx, addrs, uint16(port), host)
	if r != nil {
		p.refuse(sb, r)
		return nil, r
	}
	return c, nil
}

// hostAddrs are the host's own addresses, looked up again at most every
// hostAddrsTTL, so that an interface given an address later is covered.
type hostAddrs struct {
	lookup func() ([]netip.Addr, error)
	mu     sync.Mutex
	at     time.Time
	set    map[netip.Addr]struct{}
}

const hostAddrsTTL = 2 * time.Second

func newHostAddrs(lookup func() ([]netip.Addr, error)) *hostAddrs {
	if lookup == nil {
		lookup = interfaceAddrs
	}
	return &hostAddrs{lookup: lookup}
}

func (h *hostAddrs) has(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.set == nil || time.Since(h.at) > hostAddrsTTL {
		addrs, err := h.lookup()
		if err != nil && h.set == nil {
			return true // not knowing the host's addresses, refuse every one
		}
		if err == nil {
			h.set = map[netip.Addr]struct{}{}
			for _, x := range addrs {
				h.set[x.Unmap().WithZone("")] = struct{}{}
			}
			h.at = time.Now()
		}
	}
	_, ok := h.set[a]
	return ok
}

func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, x.Unmap())
			}
		}
	}
	return out, nil
}
