package hostnet

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/settings"
)

var testDefaults = Defaults{Pool: netip.MustParsePrefix("100.99.0.0/16"), ProxyPort: 15009, DNSPort: 15059}

func decode(pc provider.Config) (Settings, error) {
	var s Settings
	return s, settings.Decode("test", pc, s.Decoders())
}

func TestSettings(t *testing.T) {
	s, err := decode(provider.Config{"network": "on", "network-proxy": "198.51.100.1:15001", "network-pool": "100.96.4.0/22",
		"network-uplink": "/run/netns/x", "network-credentials": "/etc/berth/creds.json", "network-dns": "198.51.100.1:5353",
		"network-resolver": "203.0.113.53:53"})
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{On: true, Proxy: netip.MustParseAddrPort("198.51.100.1:15001"), Pool: netip.MustParsePrefix("100.96.4.0/22"),
		Uplink: "/run/netns/x", Credentials: "/etc/berth/creds.json", DNS: netip.MustParseAddrPort("198.51.100.1:5353"),
		Resolver: netip.MustParseAddrPort("203.0.113.53:53")}
	if s != want {
		t.Errorf("decoded %+v, want %+v", s, want)
	}
	if s, err := decode(provider.Config{"network": "off"}); err != nil || s.On {
		t.Errorf("network=off: %+v, %v", s, err)
	}
	for _, bad := range []provider.Config{
		{"network": "yes"},
		{"network": ""},
		{"network-proxy": "100.95.255.254"},
		{"network-proxy": "[::1]:15001"},
		{"network-proxy": "100.95.255.254:0"},
		{"network-proxy": "berth:15001"},
		{"network-pool": "100.96.0.0"},
		{"network-pool": "100.96.0.0/30"},
		{"network-pool": "100.0.0.0/4"},
		{"network-pool": "fd00::/64"},
		{"network-uplink": "run/netns/x"},
		{"network-credentials": "creds.json"},
		{"network-dns": "x"},
		{"network-resolver": "203.0.113.53"},
		{"network-proxies": "100.95.255.254:1"},
	} {
		_, err := decode(bad)
		if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line of bad input", bad, err)
		}
	}
}

func TestOpenOff(t *testing.T) {
	h, err := Open(t.Context(), "test", Settings{}, testDefaults, nil)
	if h != nil || err != nil {
		t.Errorf("off: %v, %v", h, err)
	}
	// The state directory is the provider's, given with networks off too.
	h, err = Open(t.Context(), "test", Settings{StateDir: t.TempDir()}, testDefaults, nil)
	if h != nil || err != nil {
		t.Errorf("off, with the state directory: %v, %v", h, err)
	}
	// Network settings without the network: a mistake, said so.
	if _, err := Open(t.Context(), "test", Settings{Pool: testDefaults.Pool}, testDefaults, nil); !errors.Is(err, errdefs.ErrBadInput) {
		t.Errorf("settings with the network off: %v", err)
	}
}

func writeCreds(t *testing.T, mode os.FileMode, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "creds.json")
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

const secret = "Bearer 0123456789abcdef0123456789abcdef"

func TestCredentialsRefused(t *testing.T) {
	good := `[{"host":"registry.npmjs.org:443","header":"Authorization","value":"` + secret + `"}]`
	many := "[" + strings.Repeat(`{"host":"a.example","header":"X-A","value":"v"},`, MaxCredentials) + `{"host":"a.example","header":"X-A","value":"v"}]`
	dir := t.TempDir()
	for name, path := range map[string]string{
		"missing":       filepath.Join(dir, "nope.json"),
		"group-read":    writeCreds(t, 0o640, good),
		"world-read":    writeCreds(t, 0o604, good),
		"a directory":   dir,
		"not json":      writeCreds(t, 0o600, `[{"host": x`+secret),
		"cut short":     writeCreds(t, 0o600, `[{"host":"`+secret),
		"not a list":    writeCreds(t, 0o600, `{"host":"a.example"}`),
		"a number":      writeCreds(t, 0o600, `[{"host":"a.example","header":"X-A","value":1}]`),
		"unknown field": writeCreds(t, 0o600, `[{"host":"a.example","header":"X-A","value":"`+secret+`","port":1}]`),
		"two values":    writeCreds(t, 0o600, good+good),
		"too many":      writeCreds(t, 0o600, many),
		"bad header":    writeCreds(t, 0o600, `[{"host":"a.example","header":"Bad Header","value":"`+secret+`"}]`),
		"framing":       writeCreds(t, 0o600, `[{"host":"a.example","header":"Host","value":"`+secret+`"}]`),
		"newline":       writeCreds(t, 0o600, `[{"host":"a.example","header":"X-A","value":"`+secret+`\r\nX-B: 1"}]`),
		"bad host":      writeCreds(t, 0o600, `[{"host":"-bad-/x","header":"X-A","value":"`+secret+`"}]`),
	} {
		t.Run(name, func(t *testing.T) {
			h, err := Open(t.Context(), "test", Settings{On: true, Credentials: path}, testDefaults, nil)
			if err == nil {
				h.Close()
				t.Fatal("opened")
			}
			if !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(err.Error(), "\n") {
				t.Errorf("%v, want one line of bad input", err)
			}
			if strings.Contains(err.Error(), "0123456789abcdef") || strings.Contains(err.Error(), "Bearer") {
				t.Errorf("the error holds the secret: %v", err)
			}
			t.Log(err)
		})
	}
}

// TestOpen starts the proxy in a contained topology's uplink, on an
// address no interface there has: the uplink's loopback is given it, the proxy answers there (refusing a source it does not know), and
// a second start, after a Close, finds it there and serves again.
func TestOpen(t *testing.T) {
	tp := nettest.New(t)
	good := writeCreds(t, 0o600, `[{"host":"pypi.org:80","header":"Authorization","value":"`+secret+`"},`+
		`{"host":"*.example.com","header":"X-Token","value":"t"}]`)
	s := Settings{On: true, Uplink: tp.Uplink, Credentials: good, StateDir: filepath.Join(t.TempDir(), "state")}
	var ca []byte
	for round := range 2 {
		h, err := Open(t.Context(), "test", s, testDefaults, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The proxy's authority is the same after a restart: sandboxes
		// that trusted it still do.
		if round == 0 {
			if ca = h.ProxyCA(); len(ca) == 0 {
				t.Fatal("no authority with credentials")
			}
		} else if !bytes.Equal(h.ProxyCA(), ca) {
			t.Error("the proxy's authority changed across a restart")
		}
		if fi, err := os.Stat(CAPath(s.StateDir)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("round %d: the authority's file: %v, %v", round, fi, err)
		}
		wantProxy := netip.MustParseAddrPort(DefaultProxyIP + ":15009")
		if h.ProxyAddr != wantProxy || h.DNSAddr != netip.MustParseAddrPort(DefaultProxyIP+":15059") || h.Pool != testDefaults.Pool || h.Uplink != tp.Uplink {
			t.Errorf("round %d: host %+v", round, h)
		}
		if c := h.Credentials("any", provider.Network{}); len(c) != 2 || c[0].Value != secret || c[1].Header != "X-Token" {
			t.Errorf("credentials %v", c)
		}
		nl, err := netlink.NewHandleAt(tp.UplinkNS)
		if err != nil {
			t.Fatal(err)
		}
		lo, err := nl.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		addrs, _ := nl.AddrList(lo, netlink.FAMILY_V4)
		nl.Close()
		var ours []string
		for _, a := range addrs {
			if a.Label == Label {
				ours = append(ours, a.IPNet.String())
			}
		}
		if len(ours) != 1 || ours[0] != DefaultProxyIP+"/32" {
			t.Errorf("round %d: lo holds %v as %s", round, ours, Label)
		}
		c, err := nettest.Dial(tp.UplinkNS, "tcp4", wantProxy.String(), 5*time.Second)
		if err != nil {
			t.Fatalf("round %d: dial the proxy: %v", round, err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !strings.Contains(err.Error(), "reset") {
			t.Errorf("an unknown source read %d bytes, %v", n, err)
		}
		c.Close()
		if got := h.Proxy.Stats().Refused[egress.ReasonUnknownSource]; got != 1 {
			t.Errorf("round %d: unknown sources refused: %d, want 1", round, got)
		}
		if err := h.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := h.Close(); err != nil {
			t.Errorf("second close: %v", err)
		}
	}
	// Closed, nothing listens.
	if c, err := nettest.Dial(tp.UplinkNS, "tcp4", DefaultProxyIP+":15009", 5*time.Second); err == nil {
		c.Close()
		t.Error("the proxy still listens after Close")
	}
	if err := tp.Contained(netip.MustParsePrefix(DefaultProxyIP + "/32")); err != nil {
		t.Fatal(err)
	}
}

// TestOpenCARefused: an authority file that others may read, or that
// is not an authority, fails the start with one line naming it, and is
// left as it was.
func TestOpenCARefused(t *testing.T) {
	tp := nettest.New(t)
	for name, tc := range map[string]struct {
		mode os.FileMode
		body string
		want string
	}{
		"group-read": {0o640, "", "mode 0640"},
		"world-read": {0o604, "", "mode 0604"},
		"malformed":  {0o600, "not an authority", "not PEM"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.body == "" {
				// A good authority, made by a start, then its mode changed.
				h, err := Open(t.Context(), "test", Settings{On: true, Uplink: tp.Uplink, StateDir: dir}, testDefaults, nil)
				if err != nil {
					t.Fatal(err)
				}
				h.Close()
			} else if err := os.MkdirAll(filepath.Dir(CAPath(dir)), 0o700); err != nil {
				t.Fatal(err)
			} else if err := os.WriteFile(CAPath(dir), []byte(tc.body), tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(CAPath(dir), tc.mode); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(CAPath(dir))
			h, err := Open(t.Context(), "test", Settings{On: true, Uplink: tp.Uplink, StateDir: dir}, testDefaults, nil)
			if err == nil {
				h.Close()
				t.Fatal("opened")
			}
			if msg := err.Error(); !errors.Is(err, errdefs.ErrBadInput) || strings.Contains(msg, "\n") ||
				!strings.Contains(msg, tc.want) || !strings.Contains(msg, CAPath(dir)) {
				t.Errorf("%v: want one line of bad input naming the file and saying %q", err, tc.want)
			}
			if after, _ := os.ReadFile(CAPath(dir)); !bytes.Equal(before, after) {
				t.Error("the refused file was changed")
			}
		})
	}
}

// TestOpenBadUplink: an uplink that is no namespace, or a proxy
// address inside the pool, is refused.
func TestOpenBadUplink(t *testing.T) {
	for name, s := range map[string]Settings{
		"no namespace":  {On: true, Uplink: filepath.Join(t.TempDir(), "nope")},
		"proxy in pool": {On: true, Proxy: netip.MustParseAddrPort("100.99.0.9:15001")},
		"dns in pool":   {On: true, DNS: netip.MustParseAddrPort("100.99.0.9:53")},
	} {
		if h, err := Open(t.Context(), "test", s, testDefaults, nil); err == nil {
			h.Close()
			t.Errorf("%s: opened", name)
		} else if !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("%s: %v, want bad input", name, err)
		}
	}
}
