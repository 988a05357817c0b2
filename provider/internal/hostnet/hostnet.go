// Package hostnet is the host side of sandboxes' networks as a
// provider's text settings (provider.Open) describe it: it decodes the
// network settings, makes the egress proxy's address exist in the uplink
// namespace, starts one egress proxy listening there, loads the host's
// credentials, and hands a provider what its NetworkConfig needs.
//
// Each provider opens its own: one proxy per provider, on a port of its
// own, so that nothing is shared between providers of one process. Two
// things outlive a Host, for the next start: the proxy's address on the
// uplink's loopback interface, which sandboxes' rules name, and the
// proxy's certificate authority in the provider's state directory
// (CAPath), which sandboxes trust (see docs/network.md).
package hostnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/netns"
	"github.com/berth-dev/berth/provider/internal/settings"
)

// Defaults every provider shares.
const (
	// DefaultProxyIP is the address the egress proxies listen on in the
	// uplink, given to its loopback interface (as Label) when no
	// interface there has it. It lies in
	// 100.64.0.0/10 (carrier-grade NAT), which the proxy never dials and
	// sandboxes reach only on the proxy's and the stub's ports, outside
	// every provider's default pool.
	DefaultProxyIP = "100.95.255.254"
	// Label labels the proxy's address on the uplink's loopback
	// interface, when hostnet put it there.
	Label = "lo:berth-egress"
	// MaxCredentials bounds the credentials file's entries: every one
	// is given to every allow sandbox, which egress bounds alike.
	MaxCredentials = egress.MaxCredentials
	// maxCredentialsBytes bounds the credentials file.
	maxCredentialsBytes = 1 << 20
)

// Defaults are what differ between the providers of one host: each
// needs a pool of its own (a Manager knows only its own sandboxes), a
// DNS stub of its own (which answers from its own state directory), and
// here a proxy port of its own.
type Defaults struct {
	Pool      netip.Prefix
	ProxyPort uint16
	DNSPort   uint16
}

// Settings are a provider's network settings.
type Settings struct {
	// On turns networks on ("network": on or off, default off).
	On bool
	// Proxy is the egress proxy's IPv4 address and port in the uplink
	// ("network-proxy"). Zero: DefaultProxyIP, Defaults.ProxyPort.
	Proxy netip.AddrPort
	// DNS is the DNS stub's address in the uplink ("network-dns").
	// Zero: Proxy's address, Defaults.DNSPort.
	DNS netip.AddrPort
	// Pool is the sandboxes' addresses ("network-pool"). Zero:
	// Defaults.Pool.
	Pool netip.Prefix
	// Uplink is the path of the uplink namespace ("network-uplink").
	// Zero: the host's own, this process's.
	Uplink string
	// Resolver is the DNS server the proxy resolves allowed names with,
	// and NetworkOpen sandboxes' names are resolved with, dialed from
	// the uplink ("network-resolver", IPv4:port). Zero: the servers of
	// the host's /etc/resolv.conf (dialed from the uplink).
	Resolver netip.AddrPort
	// Credentials is the path of a JSON file of the host's credentials
	// ("network-credentials"): [{"host": ..., "header": ..., "value":
	// ...}], of mode 0600 or stricter. Zero: none.
	Credentials string
	// StateDir is the provider's state directory, where the proxy
	// keeps its certificate authority (CAPath) so that sandboxes that
	// trust it keep working after a restart. It is no text setting: the
	// provider sets it to its own state-dir, whether or not networks
	// are on. Zero: the authority lives in memory, new at each Open.
	StateDir string
}

// CAPath is where the egress proxy of the provider whose state
// directory is stateDir keeps its certificate authority (certificate
// and key, PEM, mode 0600, in a directory of mode 0700).
func CAPath(stateDir string) string { return filepath.Join(stateDir, ".egress", "ca.pem") }

// Decoders are the settings that decode into s, for settings.Decode.
func (s *Settings) Decoders() map[string]settings.Setting {
	ipv4 := func(p *netip.AddrPort) settings.Setting {
		return func(v string) error {
			ap, err := netip.ParseAddrPort(v)
			if err != nil || !ap.Addr().Is4() || ap.Port() == 0 {
				return fmt.Errorf("%q is not an IPv4 address and port", v)
			}
			*p = ap
			return nil
		}
	}
	return map[string]settings.Setting{
		"network": func(v string) error {
			switch v {
			case "on":
				s.On = true
			case "off":
				s.On = false
			default:
				return fmt.Errorf("%q is neither on nor off", v)
			}
			return nil
		},
		"network-proxy":    ipv4(&s.Proxy),
		"network-dns":      ipv4(&s.DNS),
		"network-resolver": ipv4(&s.Resolver),
		"network-pool": func(v string) error {
			p, err := netip.ParsePrefix(v)
			if err != nil || !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 28 {
				return fmt.Errorf("%q is not an IPv4 range of /8 to /28", v)
			}
			s.Pool = p.Masked()
			return nil
		},
		"network-uplink": func(v string) error {
			if !strings.HasPrefix(v, "/") {
				return fmt.Errorf("%q is not an absolute path", v)
			}
			s.Uplink = v
			return nil
		},
		"network-credentials": func(v string) error {
			if !strings.HasPrefix(v, "/") {
				return fmt.Errorf("%q is not an absolute path", v)
			}
			s.Credentials = v
			return nil
		},
	}
}

// Host is a provider's host side of sandboxes' networks: its egress
// proxy serving, and the values of its NetworkConfig.
type Host struct {
	ProxyAddr netip.AddrPort
	DNSAddr   netip.AddrPort
	Pool      netip.Prefix
	Uplink    string
	// Resolver resolves in the uplink as the proxy does: the
	// NetworkConfig's Resolver, for NetworkOpen sandboxes.
	Resolver *net.Resolver
	// Proxy is the egress proxy at ProxyAddr: the NetworkConfig's
	// Egress.
	Proxy *egress.Proxy

	creds  []egress.Credential
	uplink vnetns.NsHandle // held for the proxy's dials
	done   chan error
	once   sync.Once
	err    error
}

// Credentials are the credentials the proxy adds to a sandbox's
// requests: every one of the host's file, for every sandbox. (The
// proxy applies a credential only to a host the sandbox's policy
// allows, and only on the ports its rule names.) It is the
// NetworkConfig's Credentials.
func (h *Host) Credentials(string, provider.Network) []egress.Credential {
	return append([]egress.Credential(nil), h.creds...)
}

// ProxyCA is the proxy's authority (PEM) when the host has
// credentials, nil when it has none: a sandbox that trusts it can use
// the credentials over HTTPS, whose TLS the proxy terminates for the
// hosts they name (and only those; it relays every other host's TLS
// untouched). It is public. It is the NetworkConfig's ProxyCA.
func (h *Host) ProxyCA() []byte {
	if len(h.creds) == 0 {
		return nil
	}
	return h.Proxy.CACertPEM()
}

// Close stops the proxy. Its address stays: the rules of
// sandboxes that outlive this process name its address, and the next
// start listens on it again. A nil Host closes as nothing.
func (h *Host) Close() error {
	if h == nil {
		return nil
	}
	h.once.Do(func() {
		h.Proxy.Close()
		if err := <-h.done; err != nil && !errors.Is(err, egress.ErrClosed) {
			h.err = err
		}
		h.uplink.Close()
	})
	return h.err
}

// Open starts the host side of name's sandboxes' networks as s says,
// or returns nil when s leaves networks off. Errors are one line:
// errdefs.ErrBadInput for settings (a credentials file that is
// missing, malformed or readable by others among them).
func Open(ctx context.Context, name string, s Settings, d Defaults, log *slog.Logger) (*Host, error) {
	if !s.On {
		given := s
		given.StateDir = "" // the provider's, set whether or not networks are on
		if given != (Settings{}) {
			return nil, fmt.Errorf("%w: %s provider: network settings given with network off", errdefs.ErrBadInput, name)
		}
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Host{ProxyAddr: s.Proxy, DNSAddr: s.DNS, Pool: s.Pool, Uplink: s.Uplink, done: make(chan error, 1)}
	if !h.ProxyAddr.IsValid() {
		h.ProxyAddr = netip.AddrPortFrom(netip.MustParseAddr(DefaultProxyIP), d.ProxyPort)
	}
	if !h.DNSAddr.IsValid() {
		h.DNSAddr = netip.AddrPortFrom(h.ProxyAddr.Addr(), d.DNSPort)
	}
	if !h.Pool.IsValid() {
		h.Pool = d.Pool
	}
	if h.Pool.Contains(h.ProxyAddr.Addr()) || h.Pool.Contains(h.DNSAddr.Addr()) {
		return nil, fmt.Errorf("%w: %s provider: network-proxy and network-dns must lie outside network-pool %s", errdefs.ErrBadInput, name, h.Pool)
	}
	creds, err := readCredentials(s.Credentials)
	if err != nil {
		return nil, fmt.Errorf("%w: %s provider: network-credentials: %v", errdefs.ErrBadInput, name, err)
	}
	h.creds = creds

	uplink, err := openUplink(s.Uplink)
	if err != nil {
		return nil, fmt.Errorf("%s provider: network-uplink: %w", name, err)
	}
	fail := func(err error) (*Host, error) {
		if h.Proxy != nil {
			h.Proxy.Close()
		}
		uplink.Close()
		return nil, err
	}
	h.uplink = uplink
	inUplink := func(f func() error) error {
		if s.Uplink == "" {
			return f()
		}
		return netns.In(uplink, f)
	}
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = inUplink(func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	h.Resolver = newResolver(s.Uplink, s.Resolver, dial)
	cfg := egress.Config{Logger: log, Resolver: h.Resolver}
	if s.StateDir != "" {
		// Made here if the provider has not yet: traversable, as the
		// linux provider's is; the authority's own directory is 0700.
		if err := os.MkdirAll(s.StateDir, 0o711); err != nil {
			return fail(fmt.Errorf("%s provider: state directory: %w", name, err))
		}
		cfg.CAFile = CAPath(s.StateDir)
	}
	if s.Uplink != "" {
		path := s.Uplink
		cfg.Dial = dial
		cfg.HostAddrs = func() ([]netip.Addr, error) { return hostAddrs(path) }
	}
	proxy, err := egress.New(cfg)
	if err != nil {
		return fail(fmt.Errorf("%s provider: %w", name, err))
	}
	h.Proxy = proxy
	if len(creds) > 0 {
		// The proxy checks credentials as a sandbox registers: check them
		// now, so that a bad file fails the start and not every sandbox.
		undo, err := proxy.Register(netip.IPv4Unspecified(), "network-credentials",
			provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"check.invalid"}}, creds)
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), `egress: sandbox "network-credentials": `)
			msg = strings.ReplaceAll(msg, errdefs.ErrBadInput.Error()+": ", "")
			return fail(fmt.Errorf("%w: %s provider: network-credentials: %s: %s", errdefs.ErrBadInput, name, s.Credentials, msg))
		}
		undo()
	}
	if err := ensureAddr(uplink, h.ProxyAddr.Addr(), log); err != nil {
		return fail(fmt.Errorf("%s provider: the egress proxy's address %s: %w", name, h.ProxyAddr.Addr(), err))
	}
	var ln net.Listener
	err = inUplink(func() (err error) {
		var lc net.ListenConfig
		ln, err = lc.Listen(ctx, "tcp4", h.ProxyAddr.String())
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("%s provider: egress proxy: %w", name, err))
	}
	go func() { h.done <- proxy.Serve(ln) }()
	log.Info("egress proxy serving", "addr", h.ProxyAddr, "uplink", s.Uplink, "pool", h.Pool, "credentials", len(creds))
	return h, nil
}

// openUplink opens the uplink namespace, this process's own for "".
func openUplink(path string) (vnetns.NsHandle, error) {
	if path == "" {
		h, err := vnetns.Get()
		if err != nil {
			return vnetns.None(), fmt.Errorf("own network namespace: %w", err)
		}
		return h, nil
	}
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		return vnetns.None(), fmt.Errorf("%w: %v", errdefs.ErrBadInput, err)
	}
	return h, nil
}

// ensureAddr makes addr an address of the uplink: if no interface has
// it, the uplink's loopback interface gets it, as a /32 labelled Label
// (a dummy interface would need a driver not every kernel has).
func ensureAddr(uplink vnetns.NsHandle, addr netip.Addr, log *slog.Logger) error {
	nl, err := netlink.NewHandleAt(uplink)
	if err != nil {
		return err
	}
	defer nl.Close()
	addrs, err := nl.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if x, ok := netip.AddrFromSlice(a.IP); ok && x.Unmap() == addr {
			return nil
		}
	}
	lo, err := nl.LinkByName("lo")
	if err != nil {
		return err
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}, Label: Label}
	if err := nl.AddrAdd(lo, a); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("add address to lo: %w", err)
	}
	if err := nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	log.Info("gave the egress proxy's address to the uplink's loopback", "addr", addr, "label", Label)
	return nil
}

// hostAddrs are the addresses of the uplink's interfaces and of this
// process's own: "the host's", which no sandbox may reach.
func hostAddrs(uplink string) ([]netip.Addr, error) {
	ns, err := vnetns.GetFromPath(uplink)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	up, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, err
	}
	own, err := netlink.NewHandle()
	if err != nil {
		up.Close()
		return nil, err
	}
	var out []netip.Addr
	for _, nl := range []*netlink.Handle{up, own} {
		addrs, err := nl.AddrList(nil, netlink.FAMILY_ALL)
		nl.Close()
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if x, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, x.Unmap())
			}
		}
	}
	return out, nil
}

// newResolver resolves through server, or the host's configured
// servers when it is zero, dialed with dial (from the uplink). With
// neither an uplink nor a server, it is the host's own resolver.
func newResolver(uplink string, server netip.AddrPort, dial func(context.Context, string, string) (net.Conn, error)) *net.Resolver {
	if uplink == "" && !server.IsValid() {
		return net.DefaultResolver
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if server.IsValid() {
			addr = server.String()
		}
		return dial(ctx, network, addr)
	}}
}

// fileCredential is a credential as the file spells it.
type fileCredential struct {
	Host   string `json:"host"`
	Header string `json:"header"`
	Value  string `json:"value"`
}

// readCredentials reads the credentials file at path, "" for none. It
// must be a regular file that neither group nor others may read or
// write. Errors never hold a value.
func readCredentials(path string) ([]egress.Credential, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: it must be 0600 or stricter", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredentialsBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxCredentialsBytes {
		return nil, fmt.Errorf("%s is over %d bytes", path, maxCredentialsBytes)
	}
	var list []fileCredential
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&list); err != nil {
		// A syntax error quotes a character of the input, which may be a
		// secret's: say where, not what.
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syn):
			return nil, fmt.Errorf("%s is not valid JSON (at byte %d)", path, syn.Offset)
		case errors.As(err, &typ):
			return nil, fmt.Errorf("%s must be a list of {host, header, value} of strings (%q is not)", path, typ.Field)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("%s is not valid JSON (it ends early)", path)
		default:
			return nil, fmt.Errorf("%s: %v", path, err) // an unknown field, by its name
		}
	}
	if dec.More() {
		return nil, fmt.Errorf("%s holds more than one JSON value", path)
	}
	if len(list) > MaxCredentials {
		return nil, fmt.Errorf("%s holds %d credentials, more than %d", path, len(list), MaxCredentials)
	}
	out := make([]egress.Credential, len(list))
	for i, c := range list {
		out[i] = egress.Credential{Host: c.Host, Header: c.Header, Value: c.Value}
	}
	return out, nil
}

// Egress is the egress proxy's registration, as *egress.Proxy offers
// it: a provider's NetworkConfig.Egress.
type Egress interface {
	Register(src netip.Addr, sandboxID string, policy provider.Network, creds []egress.Credential) (unregister func(), err error)
}

var _ Egress = (*egress.Proxy)(nil)

// Registrar is the netns.Registrar that tells e of sandboxes, with the
// credentials creds (nil: none) gives each; nil without e.
func Registrar(e Egress, creds func(sandboxID string, policy provider.Network) []egress.Credential) netns.Registrar {
	if e == nil {
		return nil
	}
	return registrar{egress: e, creds: creds}
}

type registrar struct {
	egress Egress
	creds  func(sandboxID string, policy provider.Network) []egress.Credential
}

func (r registrar) Register(src netip.Addr, id string, policy provider.Network) (func(), error) {
	var creds []egress.Credential
	if r.creds != nil {
		creds = r.creds(id, policy)
	}
	return r.egress.Register(src, id, policy, creds)
}
