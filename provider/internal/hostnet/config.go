package hostnet

import (
	"log/slog"
	"net/netip"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/cabundle"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/netns"
)

// NetworkConfig is the host side of sandboxes' networks, as the linux,
// docker and gvisor providers take it (their Config.Network; see
// package netns and docs/network.md): a sandbox whose spec asks for a
// network gets a network namespace holding a veth into Uplink, an
// address from Pool, and nftables rules in Uplink that send its TCP to
// names through the egress proxy at ProxyAddr and drop what its policy
// does not allow. A sandbox of NetworkNone gets none of it. Open makes
// one from a provider's text settings (Host.Network); tests fill one
// in themselves.
type NetworkConfig struct {
	// ProxyAddr is the egress proxy's address and port in Uplink; zero
	// turns networks off.
	ProxyAddr netip.AddrPort
	// Uplink is the path of the network namespace the host ends live
	// in. Zero means the host's own.
	Uplink string
	// Pool is the sandboxes' addresses, cut in /30s. Zero means
	// netns.DefaultPool, 100.96.0.0/16. Two providers (of different
	// state directories) on one Uplink need a Pool and a DNSAddr each:
	// each knows only its own sandboxes.
	Pool netip.Prefix
	// DNSAddr is where the DNS stub that answers sandboxes listens, in
	// Uplink. Zero means ProxyAddr's address, port 53.
	DNSAddr netip.AddrPort
	// MaxConns bounds a sandbox's connections at once, ConnRate and
	// ConnBurst its new connections a second. Zero means 256, 64 and
	// 256.
	MaxConns, ConnRate, ConnBurst uint32
	// Resolver answers NetworkOpen sandboxes' names on the host. Nil
	// means net.DefaultResolver.
	Resolver netns.Resolver
	// Egress is the proxy listening at ProxyAddr (an *egress.Proxy
	// serving there), told of each NetworkAllow sandbox's address and
	// policy. Nil: it learns of them some other way (or refuses every
	// connection, knowing no sandbox).
	Egress Egress
	// Credentials says which credentials the proxy adds to a sandbox's
	// requests (see docs/network.md, "Secrets"). Nil: none.
	Credentials func(sandboxID string, policy provider.Network) []Credential
	// ProxyCA is the egress proxy's authority (PEM, egress's
	// CACertPEM), given to sandboxes to trust when Credentials gives
	// any: the proxy terminates HTTPS to the hosts a credential names
	// with certificates of it. Every sandbox of a network finds the
	// system bundle and it in cabundle.Bundle, and the usual variables
	// name it (cabundle.Env). Nil: sandboxes trust their system bundle
	// alone, and credentials apply to plain HTTP only.
	ProxyCA []byte
}

// Credential is a header the egress proxy adds to a sandbox's requests
// to a host: the sandbox uses the secret and never holds it. The host
// configures credentials (NetworkConfig.Credentials); no spec, and so
// no workflow history, carries one.
type Credential = egress.Credential

// Enabled says whether sandboxes can have networks (policed ones).
func (n NetworkConfig) Enabled() bool { return n.ProxyAddr.IsValid() }

// Trusted says whether sandboxes are to trust the proxy's authority.
func (n NetworkConfig) Trusted() bool { return n.Enabled() && len(n.ProxyCA) > 0 }

// TrustEnv adds cabundle.Env to env, a sandbox's environment, when
// sandboxes trust the proxy's authority, but for the variables spec
// (the sandbox's own) sets, and returns env. Every sandbox of a
// network gets them, not only those of NetworkAllow when they start:
// UpdateNetwork may allow hosts later, and the environment is set once,
// at the claim. Trusting the authority lets a sandbox reach nothing it
// could not; only the host's proxy holds its key.
func (n NetworkConfig) TrustEnv(env, spec map[string]string) map[string]string {
	if n.Trusted() {
		cabundle.SetEnv(env, spec)
	}
	return env
}

// TrustCA is the authority a provider's daemons are to install in
// cabundle.Dir: ProxyCA when sandboxes trust it, else "".
func (n NetworkConfig) TrustCA() string {
	if !n.Trusted() {
		return ""
	}
	return string(n.ProxyCA)
}

// Manager is the configuration of the netns.Manager of n, recording
// its sandboxes' slots in stateDir.
func (n NetworkConfig) Manager(stateDir string, log *slog.Logger) netns.Config {
	return netns.Config{Uplink: n.Uplink, Pool: n.Pool, ProxyAddr: n.ProxyAddr, DNSAddr: n.DNSAddr,
		StateDir: stateDir, MaxConns: n.MaxConns, ConnRate: n.ConnRate, ConnBurst: n.ConnBurst,
		Resolver: n.Resolver, Proxy: Registrar(n.Egress, n.Credentials), Logger: log}
}

// Network is the NetworkConfig of h: its proxy, its credentials and,
// when it has any, the proxy's authority for sandboxes to trust.
func (h *Host) Network() NetworkConfig {
	return NetworkConfig{ProxyAddr: h.ProxyAddr, Uplink: h.Uplink, Pool: h.Pool, DNSAddr: h.DNSAddr,
		Resolver: h.Resolver, Egress: h.Proxy, Credentials: h.Credentials, ProxyCA: h.ProxyCA()}
}
