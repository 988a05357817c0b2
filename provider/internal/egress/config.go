package egress

import (
	"context"
	"crypto/x509"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// Defaults of the bounds in [Config].
const (
	// DefaultMaxConnsPerSandbox bounds one sandbox's open connections.
	DefaultMaxConnsPerSandbox = 256
	// DefaultMaxConns bounds the open connections of all sandboxes.
	DefaultMaxConns = 4096
	// DefaultConnRate is the new connections a sandbox may open per
	// second, on average, and DefaultConnBurst how many at once.
	DefaultConnRate  = 64
	DefaultConnBurst = 128
	// DefaultBandwidth is a sandbox's bytes per second in each direction,
	// over all its connections.
	DefaultBandwidth = 100 << 20
	// DefaultHeaderTimeout is the time a sandbox has to send a
	// connection's first header (a ClientHello, a request's headers).
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout ends a connection on which nothing moved for
	// that long, either way.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultDialTimeout bounds each dial to an upstream address.
	DefaultDialTimeout = 10 * time.Second
	// DefaultRelayBuffer bounds the bytes a sandbox's relayed
	// connections may hold in the host's kernel: their sockets' receive
	// and send buffers and their splice pipes, all its connections
	// together.
	DefaultRelayBuffer = 64 << 20
	// DefaultMaxHeaderBytes bounds a connection's first header: a
	// ClientHello, or an HTTP request's line and headers.
	DefaultMaxHeaderBytes = 64 << 10
)

// Fixed bounds.
const (
	// MaxCredentials bounds the credentials of one sandbox.
	MaxCredentials = 64
	// maxAddrs bounds the addresses of one name the proxy tries.
	maxAddrs = 4
	// leafValidity is how long a certificate the proxy makes for a host
	// is valid; it is renewed when less than a third is left.
	leafValidity = 24 * time.Hour
	// maxLeaves bounds the cache of host certificates.
	maxLeaves = 1024
	// chunk is the most bytes relayed between two bandwidth checks.
	chunk = 256 << 10
	// unboundedChunk is chunk when the bandwidth is Unlimited.
	unboundedChunk = 16 << 20
	// minRecvBuf is the size a relayed direction's receive buffer
	// starts at (as the kernel counts it, overhead included), and
	// maxRecvBuf the most it grows to: see relayDir. The window a
	// connection's handshake advertised (for the kernel's default
	// tcp_rmem, 10 segments on Ethernet, 64 KiB on loopback) cannot be
	// taken back: a buffer too small for what it lets the peer send
	// drops segments, which the peer sends again only after a
	// retransmission timeout (200 ms, then more), and a download through
	// a 16 KiB buffer starts with two of them.
	minRecvBuf = 64 << 10
	maxRecvBuf = 16 << 20
	// fdsPerConn is the most file descriptors a relayed connection
	// holds: its two sockets, and a pipe (two descriptors) for each
	// direction's splice.
	fdsPerConn = 6
)

// Unlimited, given as Config.Bandwidth, turns the bandwidth bound off.
const Unlimited = -1

// Resolver resolves a name on the host. *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config is a proxy's configuration. Zero fields take their defaults.
type Config struct {
	// Logger receives refusals at debug level and failures at warn.
	// Nil: slog.Default().
	Logger *slog.Logger
	// Resolver resolves allowed names. Nil: net.DefaultResolver.
	Resolver Resolver
	// Forbidden are the ranges no resolved address may lie in unless a
	// CIDR rule allows it. Nil: DefaultForbidden(). The host's own
	// addresses (HostAddrs) are refused whatever this says.
	Forbidden []netip.Prefix
	// HostAddrs lists the host's own addresses, which no connection may
	// reach. Nil: the addresses of the host's interfaces, looked up again
	// at most every few seconds.
	HostAddrs func() ([]netip.Addr, error)
	// Dial dials an upstream address (an address literal and a port).
	// Nil: a net.Dialer with DialTimeout.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// OriginalDst says where a redirected connection was going. Nil:
	// SO_ORIGINAL_DST.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// CAFile keeps the proxy's certificate authority (its certificate
	// and private key, PEM), so that sandboxes that trust it keep
	// working after a restart: read when the proxy starts, made once
	// (mode 0600, its directory 0700 if missing) when absent, made anew
	// when it ends within 30 days. A file others may read or write, or
	// one that is not an authority, fails New. Empty: an authority in
	// memory, new at each New.
	CAFile string
	// RootCAs verify the real hosts when the proxy re-originates TLS to
	// add a credential. Nil: the host's roots.
	RootCAs *x509.CertPool

	MaxConnsPerSandbox int           // 0: DefaultMaxConnsPerSandbox
	MaxConns           int           // 0: DefaultMaxConns; at most half the process's file descriptors allow
	ConnRate           float64       // per second; 0: DefaultConnRate
	ConnBurst          int           // 0: DefaultConnBurst
	Bandwidth          int64         // bytes per second; 0: DefaultBandwidth; Unlimited
	HeaderTimeout      time.Duration // 0: DefaultHeaderTimeout
	IdleTimeout        time.Duration // 0: DefaultIdleTimeout
	DialTimeout        time.Duration // 0: DefaultDialTimeout
	MaxHeaderBytes     int           // 0: DefaultMaxHeaderBytes
	RelayBuffer        int64         // bytes per sandbox; 0: DefaultRelayBuffer
}

// DefaultForbidden are the ranges a resolved address may not lie in by
// default: what is not the public internet, where the host's own
// services, its cloud's metadata service and its private networks live.
func DefaultForbidden() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // this network
		"10.0.0.0/8",     // RFC 1918
		"100.64.0.0/10",  // carrier-grade NAT
		"127.0.0.0/8",    // loopback
		"169.254.0.0/16", // link-local, cloud metadata
		"172.16.0.0/12",  // RFC 1918
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // RFC 1918
		"198.18.0.0/15",  // benchmarking
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, broadcast
		"::/96",          // unspecified, IPv4-compatible
		"::1/128",        // loopback
		"::ffff:0:0/96",  // IPv4-mapped (checked unmapped too)
		"100::/64",       // discard
		"fc00::/7",       // unique local
		"fe80::/10",      // link-local
		"ff00::/8",       // multicast
		"2001:db8::/32",  // documentation
		"64:ff9b:1::/48", // local-use NAT64
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.Forbidden == nil {
		c.Forbidden = DefaultForbidden()
	}
	set := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	set(&c.MaxConnsPerSandbox, DefaultMaxConnsPerSandbox)
	set(&c.MaxConns, DefaultMaxConns)
	set(&c.ConnBurst, DefaultConnBurst)
	set(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	if c.RelayBuffer <= 0 {
		c.RelayBuffer = DefaultRelayBuffer
	}
	if c.ConnRate <= 0 {
		c.ConnRate = DefaultConnRate
	}
	if c.Bandwidth == 0 {
		c.Bandwidth = DefaultBandwidth
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	setD(&c.HeaderTimeout, DefaultHeaderTimeout)
	setD(&c.IdleTimeout, DefaultIdleTimeout)
	setD(&c.DialTimeout, DefaultDialTimeout)
	if c.Dial == nil {
		d := &net.Dialer{Timeout: c.DialTimeout}
		c.Dial = d.DialContext
	}
	if c.OriginalDst == nil {
		c.OriginalDst = originalDst
	}
	// The proxy shares the process's file descriptors with the rest of
	// it (a worker, its providers): its connections may take half.
	if limit, ok := fdLimit(); ok {
		if most := max(int(min(limit/2/fdsPerConn, 1<<30)), 1); c.MaxConns > most {
			c.Logger.Warn("egress: fewer connections in all than configured: the process's file descriptor limit allows no more",
				"max_conns", c.MaxConns, "allowed", most, "fd_limit", limit)
			c.MaxConns = most
		}
	}
	return c
}
