// Package netns plumbs and polices a sandbox's network namespace: a
// veth pair between the sandbox's namespace and an uplink namespace (the
// host's own by default), an address from a pool, and a table of
// nftables rules per sandbox in the uplink namespace that enforces the
// sandbox's provider.Network policy in the kernel.
//
// # Addresses
//
// The pool (DefaultPool, 100.96.0.0/16) is cut in /30s. The first is
// kept: its first address is the service address every sandbox's name
// resolution points at (ServiceAddr), never assigned to an interface.
// Slot i gives the uplink end of sandbox i's veth the address .1 of its
// /30 and the sandbox's end .2, with a default route through .1. Each
// slot taken is a file in Config.StateDir, written before anything is
// made, so that Sweep finds what a process that crashed half way left.
//
// # Rules
//
// Every rule lives in the table "berth-<sandbox id>" (family inet) of
// the uplink namespace and matches only packets that come in (or go
// out) through the sandbox's own veth, so that two sandboxes' rules and
// the host's own never meet. They are written in one nftables batch, so
// that Update changes a running sandbox's rules atomically:
//
//   - anything but IPv4 from the sandbox, and any packet whose source is
//     not the sandbox's address, is dropped; so are new connections past
//     Config.MaxConns at once (ct count) or Config.ConnRate a second;
//   - DNS (port 53, UDP or TCP, to any address) is sent to the stub on
//     Config.DNSAddr, which answers from the sandbox's policy;
//   - under NetworkAllow, TCP and UDP to a CIDR rule's range on the
//     policy's ports are forwarded and masqueraded; other TCP to a port
//     some rule allows is sent to the egress proxy (Config.ProxyAddr),
//     which reads the connection's original destination and its SNI or
//     Host; everything else is dropped;
//   - under NetworkOpen, TCP and UDP are forwarded and masqueraded,
//     except to the ranges of BlockedPrefixes;
//   - the pool itself and the loopback range are never reached, not even
//     through a CIDR rule that lists them, and nothing from outside
//     starts a connection into a sandbox;
//   - from the veth, the uplink's own addresses take only the proxy's
//     and the DNS stub's ports.
//
// IPv6 is turned off in the sandbox's namespace, and its packets are
// dropped on the uplink side all the same.
//
// # The egress proxy
//
// The proxy knows a sandbox by the source address of its connections.
// A Manager with Config.Proxy tells it of each NetworkAllow sandbox's
// address and policy before its rules send it anything (Attach), again
// when the policy changes (Update: the old registration, and the
// connections it admitted, end first), and no more once the link goes
// (Detach, Sweep, Close). The proxy keeps this in memory while the
// links outlive the process, so a Manager that opens registers every
// NetworkAllow sandbox its state files record again (New, Reregister;
// Sweep for the sandboxes it keeps).
//
// # DNS
//
// The sandbox is given no resolver of the host's. Its /etc/resolv.conf
// names ServiceAddr, and its queries, to whatever address, reach the
// stub: under NetworkAllow a name that a host rule allows resolves to
// ServiceAddr (TCP to which goes to the proxy, which resolves the name
// on the host itself), any other name to nothing (NXDOMAIN); under
// NetworkOpen names resolve through Config.Resolver, on the host. AAAA
// questions get no answer.
package netns
