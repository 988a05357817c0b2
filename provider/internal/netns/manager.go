package netns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// Defaults of Config.
var (
	DefaultPool = netip.MustParsePrefix("100.96.0.0/16")
)

const (
	DefaultMaxConns  = 256 // connections a sandbox has open at once
	DefaultConnRate  = 64  // new connections a second, after a burst of DefaultConnBurst
	DefaultConnBurst = 256
)

// Resolver resolves names on the host, for NetworkOpen sandboxes'
// queries; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config sets up a Manager.
type Config struct {
	// Uplink is the path of the network namespace the uplink ends of
	// sandboxes' veths live in ("/run/netns/x", "/proc/123/ns/net").
	// Zero means this process's own, the host's.
	Uplink string
	// Pool is where sandboxes' addresses come from, cut in /30s; it
	// must be IPv4, of /8 to /28. Zero means DefaultPool.
	Pool netip.Prefix
	// ProxyAddr is the egress proxy, an address of the uplink namespace:
	// NetworkAllow's TCP to names goes there. Required.
	ProxyAddr netip.AddrPort
	// DNSAddr is where the DNS stub listens, in the uplink namespace.
	// Zero means ProxyAddr's address, port 53. Several Managers (of
	// several processes) may serve the same address: the stub answers
	// from StateDir, which they share.
	DNSAddr netip.AddrPort
	// StateDir records the slots taken. Required; made if missing.
	StateDir string
	// MaxConns bounds a sandbox's connections open at once; ConnRate
	// and ConnBurst its new connections a second. Zero means the
	// defaults above.
	MaxConns, ConnRate, ConnBurst uint32
	// Resolver answers NetworkOpen sandboxes' names. Nil means
	// net.DefaultResolver.
	Resolver Resolver
	// Proxy, if set, is told of every NetworkAllow sandbox's address
	// and policy as it is attached, updated and detached (see
	// Registrar). Nil: the proxy at ProxyAddr learns of sandboxes some
	// other way.
	Proxy  Registrar
	Logger *slog.Logger
}

// Manager plumbs sandboxes' network namespaces.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	uplink netns.NsHandle
	nl     *netlink.Handle
	dns    *stub

	mu   sync.Mutex
	next int // a hint: the slot after the last taken

	regMu sync.Mutex
	regs  map[netip.Addr]registration // what this Manager told Config.Proxy
}

// Link is a sandbox's network as Attach made it.
type Link struct {
	ID string
	// Veth is the name of the uplink end; the sandbox's is Interface.
	Veth string
	// Addr is the sandbox's address, Gateway the uplink end's.
	Addr, Gateway netip.Addr
	Policy        provider.Network
}

// Interface is the name of the sandbox's end of its veth.
const Interface = "eth0"

// New opens a Manager and starts its DNS stub. Close stops the stub.
func New(cfg Config) (*Manager, error) {
	if cfg.Pool == (netip.Prefix{}) {
		cfg.Pool = DefaultPool
	}
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() < 8 || cfg.Pool.Bits() > 28 {
		return nil, fmt.Errorf("%w: network pool %s must be IPv4, /8 to /28", errdefs.ErrBadInput, cfg.Pool)
	}
	cfg.Pool = cfg.Pool.Masked()
	if !cfg.ProxyAddr.IsValid() || !cfg.ProxyAddr.Addr().Is4() {
		return nil, fmt.Errorf("%w: network: the egress proxy's IPv4 address and port are required", errdefs.ErrBadInput)
	}
	if !cfg.DNSAddr.IsValid() {
		cfg.DNSAddr = netip.AddrPortFrom(cfg.ProxyAddr.Addr(), 53)
	}
	if cfg.StateDir == "" {
		return nil, fmt.Errorf("%w: network: a state directory is required", errdefs.ErrBadInput)
	}
	for _, f := range []struct {
		v   *uint32
		def uint32
	}{{&cfg.MaxConns, DefaultMaxConns}, {&cfg.ConnRate, DefaultConnRate}, {&cfg.ConnBurst, DefaultConnBurst}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, regs: map[netip.Addr]registration{}}
	var err error
	if cfg.Uplink == "" {
		m.uplink, err = netns.GetFromPid(os.Getpid())
	} else {
		m.uplink, err = netns.GetFromPath(cfg.Uplink)
	}
	if err != nil {
		return nil, fmt.Errorf("network: uplink namespace: %w", err)
	}
	if m.nl, err = netlink.NewHandleAt(m.uplink); err != nil {
		m.uplink.Close()
		return nil, fmt.Errorf("network: netlink: %w", err)
	}
	// Forwarding is what lets CIDR rules and open sandboxes out at all.
	if err := writeSysctl(m.uplink, "/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
		m.Close()
		return nil, fmt.Errorf("network: turn on forwarding: %w", err)
	}
	if m.dns, err = m.startStub(); err != nil {
		m.Close()
		return nil, fmt.Errorf("network: DNS stub on %s: %w", cfg.DNSAddr, err)
	}
	// A proxy that restarted with this process knows none of the
	// sandboxes whose links outlived it.
	if err := m.Reregister(context.Background()); err != nil {
		m.log.Warn("network: register sandboxes with the egress proxy again", "err", err)
	}
	return m, nil
}

// Close stops the DNS stub and unregisters what the Manager registered
// with Config.Proxy. Links stay: a Manager opened later registers them
// again.
func (m *Manager) Close() error {
	m.unregisterAll()
	if m.dns != nil {
		m.dns.close()
	}
	if m.nl != nil {
		m.nl.Close()
	}
	return m.uplink.Close()
}

// ServiceAddr is the address sandboxes' names resolve to and their
// resolv.conf names.
func (m *Manager) ServiceAddr() netip.Addr { return m.cfg.Pool.Addr().Next() }

// ResolvConf is what a sandbox's /etc/resolv.conf should say.
func (m *Manager) ResolvConf() string {
	return "nameserver " + m.ServiceAddr().String() + "\noptions attempts:2 timeout:2\n"
}

// vethName is the uplink end's name for id: names are 15 bytes at most.
func vethName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "bth" + hex.EncodeToString(h[:6])
}

// Attach gives the sandbox id, whose network namespace is at nsPath
// (or is that of process pid, when nsPath is empty), a veth into the
// uplink and rules enforcing policy, whose mode must be NetworkAllow or
// NetworkOpen. The namespace must have no interface but lo.
func (m *Manager) Attach(ctx context.Context, id, nsPath string, pid int, policy provider.Network) (l *Link, err error) {
	if err := provider.ValidateID(id); err != nil {
		return nil, err
	}
	if err := checkPolicy(policy); err != nil {
		return nil, err
	}
	if nsPath == "" {
		nsPath = "/proc/" + strconv.Itoa(pid) + "/ns/net"
	}
	target, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	defer target.Close()
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if _, err := m.lookup(id); err == nil {
		return nil, fmt.Errorf("%w: sandbox %s has a network link already", errdefs.ErrAlreadyExists, id)
	}
	rec, err := m.claim(id, policy)
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { m.release(rec) })
	gw, addr := m.addrs(rec.Slot)
	veth := vethName(id)
	peer := "btp" + veth[3:]
	la := netlink.NewLinkAttrs()
	la.Name = veth
	v := &netlink.Veth{LinkAttrs: la, PeerName: peer, PeerNamespace: netlink.NsFd(target)}
	if err := m.nl.LinkAdd(v); err != nil {
		return nil, fmt.Errorf("network of %s: add veth: %w", id, err)
	}
	undo = append(undo, func() { m.nl.LinkDel(v) })
	if err := m.plumbSandbox(target, peer, addr, gw); err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	host, err := m.nl.LinkByName(veth)
	if err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	if err := m.nl.AddrAdd(host, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(gw, 30))}); err != nil {
		return nil, fmt.Errorf("network of %s: address uplink end: %w", id, err)
	}
	if err := m.nl.LinkSetUp(host); err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	// The proxy knows the sandbox before the rules send it anything.
	if err := m.register(id, addr, policy); err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	undo = append(undo, func() { m.unregister(addr) })
	if err := m.writeRules(id, veth, addr, policy); err != nil {
		return nil, fmt.Errorf("network of %s: %w", id, err)
	}
	return &Link{ID: id, Veth: veth, Addr: addr, Gateway: gw, Policy: policy}, nil
}

// plumbSandbox names the sandbox's end Interface, addresses it, routes
// through gw and turns IPv6 off, inside the sandbox's namespace.
func (m *Manager) plumbSandbox(target netns.NsHandle, peer string, addr, gw netip.Addr) error {
	nl, err := netlink.NewHandleAt(target)
	if err != nil {
		return err
	}
	defer nl.Close()
	link, err := nl.LinkByName(peer)
	if err != nil {
		return err
	}
	if err := nl.LinkSetName(link, Interface); err != nil {
		return fmt.Errorf("rename sandbox end: %w", err)
	}
	for _, f := range []string{"all", "default", Interface} {
		err := writeSysctl(target, "/proc/sys/net/ipv6/conf/"+f+"/disable_ipv6", "1")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("turn IPv6 off: %w", err)
		}
	}
	if err := nl.AddrAdd(link, &netlink.Addr{IPNet: ipnet(netip.PrefixFrom(addr, 30))}); err != nil {
		return fmt.Errorf("address sandbox end: %w", err)
	}
	if err := nl.LinkSetUp(link); err != nil {
		return err
	}
	if err := nl.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

func ipnet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func checkPolicy(p provider.Network) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Mode != provider.NetworkAllow && p.Mode != provider.NetworkOpen {
		return fmt.Errorf("%w: network: a link is for the allow and open modes, not none", errdefs.ErrBadInput)
	}
	return nil
}

func (m *Manager) nft() (*nftables.Conn, error) {
	return nftables.New(nftables.WithNetNSFd(int(m.uplink)))
}

func (m *Manager) writeRules(id, veth string, addr netip.Addr, policy provider.Network) error {
	c, err := m.nft()
	if err != nil {
		return err
	}
	r := ruleset{table: tableName(id), veth: veth, addr: addr, policy: policy, proxy: m.cfg.ProxyAddr, dns: m.cfg.DNSAddr,
		pool: m.cfg.Pool, conns: m.cfg.MaxConns, rate: m.cfg.ConnRate, burst: m.cfg.ConnBurst}
	if err := r.write(c); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	return nil
}

// Update replaces a sandbox's rules with policy's, in one batch: its
// connections see the old rules or the new, never none.
func (m *Manager) Update(ctx context.Context, id string, policy provider.Network) error {
	if err := checkPolicy(policy); err != nil {
		return err
	}
	rec, err := m.lookup(id)
	if err != nil {
		return err
	}
	_, addr := m.addrs(rec.Slot)
	if err := m.register(id, addr, policy); err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	if err := m.writeRules(id, vethName(id), addr, policy); err != nil {
		// The rules are the old ones still: so is the proxy's policy.
		if rerr := m.register(id, addr, rec.Policy); rerr != nil {
			m.log.Warn("network: register the old policy again", "sandbox", id, "err", rerr)
		}
		return fmt.Errorf("network of %s: %w", id, err)
	}
	rec.Policy = policy
	return m.rewrite(rec)
}

// Link describes the link of id, from its record.
func (m *Manager) Link(id string) (*Link, error) {
	rec, err := m.lookup(id)
	if err != nil {
		return nil, err
	}
	gw, addr := m.addrs(rec.Slot)
	return &Link{ID: id, Veth: vethName(id), Addr: addr, Gateway: gw, Policy: rec.Policy}, nil
}

// Detach removes the sandbox's veth, table and slot. Detaching what has
// none is not an error.
func (m *Manager) Detach(ctx context.Context, id string) error {
	rec, err := m.lookup(id)
	if errors.Is(err, errdefs.ErrNotFound) {
		// The slot is taken before the kernel holds anything, and freed
		// after: a sandbox without one has nothing to remove (and a
		// sandbox without a network costs no netlink call here).
		return nil
	}
	if err != nil {
		return err
	}
	_, addr := m.addrs(rec.Slot)
	m.unregister(addr)
	if err := m.removeKernel(id); err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	return m.release(rec)
}

// removeKernel deletes what the kernel holds of id: its veth (and with
// it the sandbox's end) and its table.
func (m *Manager) removeKernel(id string) error {
	if l, err := m.nl.LinkByName(vethName(id)); err == nil {
		if err := m.nl.LinkDel(l); err != nil {
			return fmt.Errorf("delete veth: %w", err)
		}
	}
	c, err := m.nft()
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: tableName(id), Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("delete nftables table: %w", err)
	}
	return nil
}

// Sweep removes the links, tables and slots of sandboxes for which live
// is false: those a crash left behind. Tables named TablePrefix… in the
// uplink with no slot are removed as well. The sandboxes it keeps are
// registered with Config.Proxy again (see Reregister).
func (m *Manager) Sweep(ctx context.Context, live func(id string) bool) error {
	recs, err := m.records()
	if err != nil {
		return err
	}
	var errs []error
	recorded := map[string]bool{}
	for _, rec := range recs {
		if rec.ID != "" && live(rec.ID) {
			recorded[rec.ID] = true
			if err := m.reregister(rec); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		_, addr := m.addrs(rec.Slot)
		m.unregister(addr)
		if rec.ID != "" {
			if err := m.removeKernel(rec.ID); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := m.release(rec); err != nil {
			errs = append(errs, err)
		}
	}
	c, err := m.nft()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, t := range tables {
		id, ok := strings.CutPrefix(t.Name, TablePrefix)
		if ok && !recorded[id] && !live(id) {
			if err := m.removeKernel(id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
