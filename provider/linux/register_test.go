package linux

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/hostnet"
)

// TestOpenNetworkOn opens the provider as `berth dev --provider-config
// linux.network=on` does, from text settings alone, with its uplink in
// a contained topology: the provider starts its own egress proxy there
// (on the default address, which the uplink's loopback is given), a
// sandbox allowed pypi.org fetches http://pypi.org/ through it, and the
// credential of the host's file arrives at pypi.org's server. Closing
// the provider stops the proxy.
func TestOpenNetworkOn(t *testing.T) {
	tp := nettest.New(t)
	secret := "Bearer " + randHex(t)
	creds := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(creds, []byte(`[{"host":"pypi.org:80","header":"Authorization","value":"`+secret+`"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	pc := provider.Config{"state-dir": shortTempDir(t), "daemon": os.Getenv("BERTH_TEST_DAEMON"), "pool": "-1",
		"network": "on", "network-uplink": tp.Uplink, "network-resolver": tp.DNS.Addr(), "network-credentials": creds}
	opened, err := provider.Open(t.Context(), Name, pc)
	if err != nil {
		t.Fatal(err)
	}
	p := opened.(*Provider)
	closed := false
	defer func() {
		if !closed {
			destroyAll(t, p)
			p.Close()
		}
	}()
	if c := p.Capabilities(); !c.Network || !c.NetworkAllow {
		t.Fatalf("capabilities %+v: no network", c)
	}
	proxy := netip.MustParseAddrPort(hostnet.DefaultProxyIP + ":15001")
	if got := p.cfg.Network; got.ProxyAddr != proxy || got.Pool != netip.MustParsePrefix("100.96.0.0/16") ||
		got.DNSAddr != netip.MustParseAddrPort(hostnet.DefaultProxyIP+":15053") || got.Uplink != tp.Uplink {
		t.Errorf("network config %+v", got)
	}
	sb := create(t, p, provider.Spec{ID: "opened", Network: provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}})
	out := sh(t, sb, `/usr/bin/python3 -c 'import urllib.request; print(urllib.request.urlopen("http://pypi.org/", timeout=5).read().decode())'`)
	if !strings.Contains(out, "pypi.org") {
		t.Errorf("the sandbox fetched %q", out)
	}
	// The host has credentials: the sandbox trusts the proxy's authority.
	ca := p.cfg.hostNet.Proxy.CACertPEM()
	if !bytes.Equal(p.cfg.Network.ProxyCA, ca) || len(ca) == 0 {
		t.Errorf("network config's ProxyCA is not the proxy's authority")
	}
	if got := sh(t, sb, `echo "$SSL_CERT_FILE"; cat /berth/proxy-ca.pem`); got != "/berth/ca-bundle.pem\n"+string(ca) {
		t.Errorf("the sandbox sees %q", got)
	}
	// The authority is the state directory's, kept for the next start.
	if kept, err := os.ReadFile(hostnet.CAPath(pc["state-dir"])); err != nil || !bytes.Contains(kept, ca) {
		t.Errorf("the state directory's authority (%v) is not the proxy's", err)
	}
	var with int
	for _, r := range tp.Hosts["pypi.org"].Requests() {
		if r.Header.Get("Authorization") == secret {
			with++
		}
	}
	if with != 1 {
		t.Errorf("requests with the credential: %d, want 1", with)
	}
	for _, h := range tp.Hosts["pypi.org"].Hits() {
		if h.From != nettest.HostAddr {
			t.Errorf("pypi.org saw a connection from %s, not the uplink", h.From)
		}
	}
	if hits := tp.Hosts["evil.example"].Hits(); len(hits) != 0 {
		t.Errorf("evil.example was reached: %v", hits)
	}
	destroyAll(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	if c, err := nettest.Dial(tp.UplinkNS, "tcp4", proxy.String(), 5*time.Second); err == nil {
		c.Close()
		t.Error("the proxy listens after the provider closed")
	}
	if err := tp.Contained(netip.MustParsePrefix("100.96.0.0/16"), netip.MustParsePrefix(hostnet.DefaultProxyIP+"/32")); err != nil {
		t.Fatal(err)
	}
}

// TestOpenNetworkRefused: settings the network cannot start from are
// refused in one line, and nothing is left listening.
func TestOpenNetworkRefused(t *testing.T) {
	tp := nettest.New(t)
	open := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(open, []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	base := func(kv ...string) provider.Config {
		pc := provider.Config{"state-dir": shortTempDir(t), "daemon": os.Getenv("BERTH_TEST_DAEMON"), "pool": "-1",
			"network": "on", "network-uplink": tp.Uplink, "network-proxy": "198.51.100.1:15021"}
		for i := 0; i < len(kv); i += 2 {
			pc[kv[i]] = kv[i+1]
		}
		return pc
	}
	for name, pc := range map[string]provider.Config{
		"network=maybe":         base("network", "maybe"),
		"credentials too open":  base("network-credentials", open),
		"credentials missing":   base("network-credentials", filepath.Join(t.TempDir(), "missing.json")),
		"pool not a range":      base("network-pool", "100.96.0.0"),
		"proxy in the pool":     base("network-pool", "198.51.100.0/24"),
		"uplink not there":      base("network-uplink", "/run/netns/berth-test-no-such"),
		"settings, network off": base("network", "off"),
	} {
		t.Run(name, func(t *testing.T) {
			p, err := provider.Open(t.Context(), Name, pc)
			if err == nil {
				p.(*Provider).Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v, want one line of bad input", err)
			}
			if c, err := nettest.Dial(tp.UplinkNS, "tcp4", "198.51.100.1:15021", 5*time.Second); err == nil {
				c.Close()
				t.Error("a proxy listens after a refused start")
			}
		})
	}
}
