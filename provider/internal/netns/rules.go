package netns

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// TablePrefix starts the name of every sandbox's table; the rest is the
// sandbox's id.
const TablePrefix = "berth-"

// BlockedPrefixes are the ranges a NetworkOpen sandbox never reaches:
// the uplink's neighbours and the cloud's metadata service rather than
// the internet. A NetworkAllow sandbox reaches one only through a CIDR
// rule that lists it. (The pool and 127.0.0.0/8 are never reached.)
var BlockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"), // carrier-grade NAT, the default pool among them
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

var loopback = netip.MustParsePrefix("127.0.0.0/8")

// ruleset is what a sandbox's table is made of.
type ruleset struct {
	table  string
	veth   string // the uplink end
	addr   netip.Addr
	policy provider.Network
	proxy  netip.AddrPort
	dns    netip.AddrPort
	pool   netip.Prefix
	conns  uint32
	rate   uint32
	burst  uint32
}

func tableName(id string) string { return TablePrefix + id }

// write queues, on c, the table's replacement: the table is added (to
// be sure it exists), deleted and made anew in one batch, so that the
// kernel swaps the old rules for the new ones at once or not at all.
func (r ruleset) write(c *nftables.Conn) error {
	t := &nftables.Table{Name: r.table, Family: nftables.TableFamilyINet}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)

	accept := nftables.ChainPolicyAccept
	chain := func(name string, hook *nftables.ChainHook, prio *nftables.ChainPriority, typ nftables.ChainType) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Hooknum: hook, Priority: prio, Type: typ, Policy: &accept})
	}
	guard := chain("guard", nftables.ChainHookPrerouting, nftables.ChainPriorityMangle, nftables.ChainTypeFilter)
	dnat := chain("dnat", nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest, nftables.ChainTypeNAT)
	fwd := chain("forward", nftables.ChainHookForward, nftables.ChainPriorityFilter, nftables.ChainTypeFilter)
	in := chain("input", nftables.ChainHookInput, nftables.ChainPriorityFilter, nftables.ChainTypeFilter)
	snat := chain("snat", nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource, nftables.ChainTypeNAT)

	proxyPorts, cidrPorts := r.ports()
	sets := map[string]*nftables.Set{}
	for _, s := range []struct {
		name string
		typ  nftables.SetDatatype
		keys [][]byte
	}{
		{"proxyports", nftables.TypeInetService, portKeys(proxyPorts)},
		{"cidrports", nftables.TypeInetService, portKeys(cidrPorts)},
		{"l4", nftables.TypeInetProto, [][]byte{{unix.IPPROTO_TCP}, {unix.IPPROTO_UDP}}},
	} {
		set := &nftables.Set{Table: t, Name: s.name, KeyType: s.typ}
		var elems []nftables.SetElement
		for _, k := range s.keys {
			elems = append(elems, nftables.SetElement{Key: k})
		}
		if err := c.AddSet(set, elems); err != nil {
			return fmt.Errorf("nftables set %s: %w", s.name, err)
		}
		sets[s.name] = set
	}
	in4 := append([]expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}}, lookup(sets["l4"])...)
	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	iif, oif := ifname(unix.NFT_META_IIFNAME, r.veth), ifname(unix.NFT_META_OIFNAME, r.veth)
	drop, acc := verdict(expr.VerdictDrop), verdict(expr.VerdictAccept)

	// guard: what no policy lets through.
	rule(guard, iif, cmpMeta(expr.MetaKeyNFPROTO, expr.CmpOpNeq, []byte{unix.NFPROTO_IPV4}), drop)
	rule(guard, iif, payload(12, 4), cmp(expr.CmpOpNeq, r.addr.AsSlice()), drop)
	rule(guard, iif, ctState(expr.CtStateBitNEW), []expr.Any{&expr.Connlimit{Count: r.conns, Flags: expr.NFT_CONNLIMIT_F_INV}}, drop)
	rule(guard, iif, ctState(expr.CtStateBitNEW), []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(r.rate), Unit: expr.LimitTimeSecond, Burst: r.burst, Over: true}}, drop)

	// dnat: DNS to the stub; TCP that no CIDR rule covers to the proxy.
	var cidrs []netip.Prefix
	if r.policy.Mode == provider.NetworkAllow {
		cidrs = r.cidrs()
		for _, p := range cidrs {
			rule(dnat, iif, daddrIn(p), in4, dport(), lookup(sets["cidrports"]), acc)
		}
	}
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		rule(dnat, iif, cmpMeta(expr.MetaKeyL4PROTO, expr.CmpOpEq, []byte{proto}), dport(), cmp(expr.CmpOpEq, port(53)), dnatTo(r.dns))
	}
	if r.policy.Mode == provider.NetworkAllow {
		rule(dnat, iif, cmpMeta(expr.MetaKeyL4PROTO, expr.CmpOpEq, []byte{unix.IPPROTO_TCP}), dport(), lookup(sets["proxyports"]), dnatTo(r.proxy))
	}

	// forward: nothing starts a connection into the sandbox; what it
	// starts goes where its policy says.
	rule(fwd, oif, ctState(expr.CtStateBitNEW), drop)
	rule(fwd, iif, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), acc)
	rule(fwd, iif, daddrIn(r.pool), drop)
	rule(fwd, iif, daddrIn(loopback), drop)
	switch r.policy.Mode {
	case provider.NetworkAllow:
		for _, p := range cidrs {
			rule(fwd, iif, daddrIn(p), in4, dport(), lookup(sets["cidrports"]), acc)
		}
	case provider.NetworkOpen:
		for _, p := range BlockedPrefixes {
			rule(fwd, iif, daddrIn(p), drop)
		}
		rule(fwd, iif, in4, acc)
	}
	rule(fwd, iif, drop)

	// input: of the uplink's own addresses, the proxy's and the stub's
	// ports alone (reached through dnat).
	rule(in, iif, ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), acc)
	rule(in, iif, cmpMeta(expr.MetaKeyL4PROTO, expr.CmpOpEq, []byte{unix.IPPROTO_TCP}), daddrIn(netip.PrefixFrom(r.proxy.Addr(), 32)), dport(), cmp(expr.CmpOpEq, port(r.proxy.Port())), acc)
	rule(in, iif, in4, daddrIn(netip.PrefixFrom(r.dns.Addr(), 32)), dport(), cmp(expr.CmpOpEq, port(r.dns.Port())), acc)
	rule(in, iif, drop)

	// snat: what is forwarded leaves with the uplink's address.
	rule(snat, iif, []expr.Any{&expr.Masq{}})
	return nil
}

// ports are the TCP ports sent to the proxy (every port a rule allows)
// and the ports of CIDR rules (the policy's).
func (r ruleset) ports() (proxy, cidr []uint16) {
	cidr = r.policy.Ports
	if len(cidr) == 0 {
		cidr = provider.DefaultNetworkPorts
	}
	proxy = slices.Clone(cidr)
	for _, h := range r.policy.Hosts {
		if i := strings.LastIndexByte(h, ':'); i >= 0 {
			if p, err := strconv.ParseUint(h[i+1:], 10, 16); err == nil && p != 0 {
				proxy = append(proxy, uint16(p))
			}
		}
	}
	slices.Sort(proxy)
	proxy = slices.Compact(proxy)
	if len(r.policy.Hosts) == 0 {
		proxy = nil // no name to proxy for
	}
	return proxy, cidr
}

// cidrs are the policy's IPv4 ranges (IPv6 is off in the sandbox).
func (r ruleset) cidrs() []netip.Prefix {
	var out []netip.Prefix
	for _, c := range r.policy.CIDRs {
		var p netip.Prefix
		if a, err := netip.ParseAddr(c); err == nil {
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		} else if p, err = netip.ParsePrefix(c); err != nil {
			continue // Validate refused it before
		}
		if p.Addr().Is4() {
			out = append(out, p.Masked())
		}
	}
	return out
}

func portKeys(ports []uint16) [][]byte {
	var keys [][]byte
	for _, p := range ports {
		keys = append(keys, port(p))
	}
	return keys
}

func port(p uint16) []byte { return binaryutil.BigEndian.PutUint16(p) }

func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

func cmpMeta(key expr.MetaKey, op expr.CmpOp, data []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: data}}
}

func cmp(op expr.CmpOp, data []byte) []expr.Any {
	return []expr.Any{&expr.Cmp{Op: op, Register: 1, Data: data}}
}

// payload loads len bytes of the IPv4 header at off.
func payload(off, n uint32) []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}}
}

func dport() []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}}
}

func daddrIn(p netip.Prefix) []expr.Any {
	mask := netipMask(p.Bits())
	return append(payload(16, 4),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

func netipMask(bits int) []byte {
	m := make([]byte, 4)
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

func ctState(bits uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

func lookup(s *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}}
}

func dnatTo(to netip.AddrPort) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: to.Addr().AsSlice()},
		&expr.Immediate{Register: 2, Data: port(to.Port())},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
