package linux

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/nettest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/egresstest"
)

// egressPort is where the tests' egress proxy listens, on
// nettest.HostAddr in the uplink.
const egressPort = 15001

// startEgress runs a real egress proxy in tp's uplink (egresstest.Start).
var startEgress = egresstest.Start

// egressProbe runs cases from inside a sandbox, printing one line for
// each: "<case> ok <what came back>" or "<case> err <exception>".
const egressProbe = `
import socket, ssl, sys, urllib.request
ca, service, evil = sys.argv[1], sys.argv[2], sys.argv[3]
open("/tmp/testca.pem", "w").write(ca)

def http_name():
    return urllib.request.urlopen("http://pypi.org/", timeout=5).read().decode()

def https_name():
    ctx = ssl.create_default_context(cafile="/tmp/testca.pem")  # the test CA alone
    with urllib.request.urlopen("https://pypi.org/", timeout=5, context=ctx) as r:
        return r.read().decode()

def evil_name():
    return str(socket.getaddrinfo("evil.example", 80))

def sni_evil():
    ctx = ssl.create_default_context(cafile="/tmp/testca.pem")
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    s = socket.create_connection((service, 443), timeout=5)
    t = ctx.wrap_socket(s, server_hostname="evil.example")
    t.sendall(b"GET / HTTP/1.0\r\nHost: evil.example\r\n\r\n")
    return t.recv(4096).decode()

def raw(host, port, req):
    s = socket.create_connection((host, port), timeout=5)
    s.sendall(req)
    out = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        out += b
    return out.decode(errors="replace")

def forged_host():
    return raw(evil, 80, b"GET / HTTP/1.0\r\nHost: pypi.org\r\n\r\n")

def port_unlisted():
    return raw("pypi.org", 8080, b"GET / HTTP/1.0\r\nHost: pypi.org\r\n\r\n")

for name in sys.argv[4:]:
    try:
        print(name, "ok", globals()[name]().replace("\n", " ").strip())
    except Exception as e:
        print(name, "err", type(e).__name__, getattr(e, "errno", ""))
    sys.stdout.flush()
`

func probeEgress(t *testing.T, e *netEnv, sb provider.Sandbox, cases ...string) map[string]string {
	t.Helper()
	var out, errOut strings.Builder
	argv := append([]string{"/usr/bin/python3", "-c", egressProbe, string(e.tp.CAPEM), e.p.net.ServiceAddr().String(), nettest.EvilAddr.String()}, cases...)
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: argv, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: exit %d, %v; stderr: %s", res.ExitCode, err, errOut.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		name, rest, _ := strings.Cut(line, " ")
		got[name] = rest
	}
	if len(got) != len(cases) {
		t.Fatalf("probe printed %q for %v", out.String(), cases)
	}
	return got
}

// refusal says whether a probe's line is a network error, not an answer
// and not a fault of the probe itself (a NameError would pass for a
// refusal otherwise).
func refusal(line string) bool {
	kind, _, _ := strings.Cut(strings.TrimPrefix(line, "err "), " ")
	switch kind {
	case "SSLZeroReturnError", "SSLEOFError", "SSLError", "ConnectionResetError", "ConnectionAbortedError",
		"ConnectionRefusedError", "BrokenPipeError", "RemoteDisconnected", "URLError", "OSError", "TimeoutError":
		return strings.HasPrefix(line, "err ")
	}
	return false
}

func (e *netEnv) noHits(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if hits := e.tp.Hosts[n].Hits(); len(hits) != 0 {
			t.Errorf("%s was reached: %v", n, hits)
		}
	}
}

// TestEgressEndToEnd drives the real egress proxy from inside a linux
// sandbox whose policy allows pypi.org: names go through it, decided by
// name and resolved on the host; nothing else gets out, and the hosts
// it must not reach see nothing at all.
func TestEgressEndToEnd(t *testing.T) {
	e := newNetProvider(t)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := create(t, e.p, provider.Spec{ID: "egress", Network: policy})
	got := probeEgress(t, e, sb, "http_name", "https_name", "evil_name", "sni_evil", "forged_host", "port_unlisted")
	t.Logf("from inside the sandbox: %q", got)
	for _, c := range []struct {
		name, want string
	}{
		{"http_name", "ok pypi.org"},
		// Verified against the test CA alone: the proxy relayed the TLS
		// of pypi.org's own server, it did not terminate it.
		{"https_name", "ok pypi.org"},
		{"evil_name", "err gaierror -2"}, // EAI_NONAME: NXDOMAIN from the stub
	} {
		if got[c.name] != c.want {
			t.Errorf("%s: %q, want %q", c.name, got[c.name], c.want)
		}
	}
	// Refused: the proxy closes, the rules drop.
	for _, name := range []string{"sni_evil", "port_unlisted"} {
		if !refusal(got[name]) {
			t.Errorf("%s: %q, want a network error", name, got[name])
		}
	}
	// A Host forged to pypi.org, aimed at evil's address: decided by the
	// name, it reaches pypi.org's servers and never evil's.
	if r := got["forged_host"]; !strings.HasPrefix(r, "ok") || !strings.Contains(r, "pypi.org") || strings.Contains(r, "evil.example") {
		t.Errorf("forged_host: %q, want pypi.org's answer", r)
	}
	e.noHits(t, "evil.example", "metadata", "private")
	for _, r := range e.tp.Hosts["pypi.org"].Requests() {
		if r.Host != "pypi.org" {
			t.Errorf("pypi.org got a request for %q", r.Host)
		}
	}
	for _, h := range e.tp.Hosts["pypi.org"].Hits() {
		if h.From != nettest.HostAddr {
			t.Errorf("pypi.org saw a connection from %s, not the host's uplink", h.From)
		}
	}

	// Rebinding: the name now resolves, on the host, to the metadata
	// service, then to the private host. The proxy checks what it
	// resolves and dials only that: it refuses, and neither sees a byte.
	for _, to := range []netip.Addr{nettest.MetadataAddr, nettest.PrivateAddr, nettest.HostAddr} {
		t.Run("rebind to "+to.String(), func(t *testing.T) {
			e.tp.DNS.Set("pypi.org", to)
			defer e.tp.DNS.Set("pypi.org", nettest.PyPIAddr)
			got := probeEgress(t, e, sb, "http_name", "https_name")
			t.Logf("from inside the sandbox: %q", got)
			for name, r := range got {
				if !refusal(r) {
					t.Errorf("%s after rebinding to %s: %q, want a network error", name, to, r)
				}
			}
			e.noHits(t, "metadata", "private", "evil.example")
		})
	}
	if s := e.egress.Stats(); s.Refused[egress.ReasonAddrForbidden] == 0 || s.Refused[egress.ReasonHostNotAllowed] == 0 {
		t.Errorf("proxy refusals = %v, want forbidden addresses and a host not allowed", s.Refused)
	}
	// Back to pypi.org's own address, the name works again.
	if got := probeEgress(t, e, sb, "http_name"); got["http_name"] != "ok pypi.org" {
		t.Errorf("after rebinding back: %q", got["http_name"])
	}
}

// TestEgressCredential: a credential the host holds is added on the way
// to pypi.org; the sandbox's environment, its files and the provider's
// state hold no trace of it.
func TestEgressCredential(t *testing.T) {
	secret := "Bearer " + randHex(t)
	e := newNetProvider(t, func(n *NetworkConfig) {
		n.Credentials = func(id string, _ provider.Network) []Credential {
			if id != "egress-cred" {
				return nil
			}
			// Port 80 alone: HTTPS to pypi.org stays end to end.
			return []Credential{{Host: "pypi.org:80", Header: "Authorization", Value: secret}}
		}
	})
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := create(t, e.p, provider.Spec{ID: "egress-cred", Network: policy})
	other := create(t, e.p, provider.Spec{ID: "egress-nocred", Network: policy})
	for _, s := range []provider.Sandbox{sb, other} {
		if got := probeEgress(t, e, s, "http_name", "https_name"); got["http_name"] != "ok pypi.org" || got["https_name"] != "ok pypi.org" {
			t.Fatalf("probe: %v", got)
		}
	}
	var with, without int
	for _, r := range e.tp.Hosts["pypi.org"].Requests() {
		switch {
		case r.TLS && r.Header.Get("Authorization") != "":
			t.Error("the credential went over HTTPS, which it does not apply to")
		case r.TLS:
		case r.Header.Get("Authorization") == secret:
			with++
		case r.Header.Get("Authorization") == "":
			without++
		default:
			t.Errorf("pypi.org got Authorization %q", r.Header.Get("Authorization"))
		}
	}
	if with != 1 || without != 1 {
		t.Errorf("HTTP requests with the credential %d, without %d; want 1 and 1", with, without)
	}
	// Nothing of the sandbox holds it: not its environment, not what it
	// can read, not what the provider keeps of it.
	// The sandbox is not given the value to look for: it prints every
	// run of 32 hex digits it can find, the secret's shape.
	var out, errOut strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", hexRuns}, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("hex runs: exit %d, %v; %s", res.ExitCode, err, errOut.String())
	}
	if !strings.Contains(out.String(), "files ") {
		t.Fatalf("hex runs printed %q", out.String())
	}
	if strings.Contains(out.String(), secret[len("Bearer "):]) {
		t.Error("the sandbox can read the credential")
	}
	// What the provider keeps of its sandboxes: their records and the
	// network's state files.
	kept, _ := filepath.Glob(filepath.Join(e.p.cfg.StateDir, "*", recordFile))
	nets, _ := filepath.Glob(filepath.Join(e.p.cfg.StateDir, networkDir, "*"))
	if len(kept) < 2 || len(nets) < 4 {
		t.Fatalf("found %d records and %d network state files", len(kept), len(nets))
	}
	for _, path := range append(kept, nets...) {
		if b, err := os.ReadFile(path); err != nil {
			t.Error(err)
		} else if strings.Contains(string(b), secret[len("Bearer "):]) {
			t.Errorf("%s holds the credential", path)
		}
	}
}

func randHex(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestEgressAfterRestart: the host process restarts, and with it the
// proxy, which knows no sandbox; the sandboxes and their links live on.
// The provider opened anew registers them with the new proxy, and their
// names work again.
func TestEgressAfterRestart(t *testing.T) {
	e := newNetProvider(t)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := create(t, e.p, provider.Spec{ID: "egress-restart", Network: policy})
	if got := probeEgress(t, e, sb, "http_name"); got["http_name"] != "ok pypi.org" {
		t.Fatalf("before: %q", got["http_name"])
	}
	e.egress.Close()
	fresh, _ := startEgress(t, e.tp, egressPort, nil)
	if got := probeEgress(t, e, sb, "http_name"); strings.HasPrefix(got["http_name"], "ok") {
		t.Fatalf("a proxy that knows no sandbox relayed: %q", got["http_name"])
	}
	cfg := e.p.cfg
	cfg.Network.Egress = fresh
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if got := probeEgress(t, e, sb, "http_name"); got["http_name"] != "ok pypi.org" {
		t.Errorf("after the provider opened again: %q", got["http_name"])
	}
	if s := fresh.Stats(); s.Refused[egress.ReasonUnknownSource] == 0 {
		t.Errorf("the fresh proxy's refusals = %v, want the unknown source", s.Refused)
	}
}

// hexRuns prints the runs of 32 hex digits in the sandbox's environment
// and in the files it can read under /etc, /tmp, /home, /root and its
// workspace (the first MiB of each), then how many files it read.
const hexRuns = `
import os, re
pat = re.compile(rb"[0-9a-f]{32}")
found = set(pat.findall("\n".join(k + "=" + v for k, v in os.environ.items()).encode()))
n = 0
for top in ["/etc", "/tmp", "/home", "/root", "."]:
    for d, _, files in os.walk(top):
        for f in files:
            p = os.path.join(d, f)
            try:
                if not os.path.isfile(p) or os.path.islink(p):
                    continue
                with open(p, "rb") as fh:
                    found.update(pat.findall(fh.read(1 << 20)))
                n += 1
            except OSError:
                pass
for h in sorted(found):
    print(h.decode())
print("files", n)
`

// trustProbe prints, for https://pypi.org/ fetched with Python's default
// context (which reads SSL_CERT_FILE), what came back and who issued the
// certificate; for evil.example, allowed and without a credential, who
// issued its certificate and whether the test CA alone verifies it; and
// the CA variables the sandbox's commands get.
const trustProbe = `
import os, socket, ssl, sys, urllib.request
open("/tmp/testca.pem", "w").write(sys.argv[1])
def issuer(host, ctx):
    s = ctx.wrap_socket(socket.create_connection((host, 443), timeout=5), server_hostname=host)
    try:
        return dict(x[0] for x in s.getpeercert()["issuer"])["commonName"]
    finally:
        s.close()
def run(name, f):
    try:
        print(name, "ok", f())
    except Exception as e:
        print(name, "err", type(e).__name__)
run("pypi_body", lambda: urllib.request.urlopen("https://pypi.org/", timeout=5).read().decode().strip())
run("pypi_issuer", lambda: issuer("pypi.org", ssl.create_default_context()))
run("pypi_testca", lambda: issuer("pypi.org", ssl.create_default_context(cafile="/tmp/testca.pem")))
run("evil_issuer", lambda: issuer("evil.example", ssl.create_default_context()))
run("evil_testca", lambda: issuer("evil.example", ssl.create_default_context(cafile="/tmp/testca.pem")))
for k in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"]:
    print(k, "ok", os.environ.get(k, "-"))
`

// TestEgressCredentialHTTPS: with the proxy's authority given to its
// sandboxes, a credential reaches pypi.org over HTTPS, from a client
// that verifies with its default trust; evil.example, allowed without a
// credential, is still relayed untouched and its own certificate
// verified; the secret is nowhere the sandbox can read.
func TestEgressCredentialHTTPS(t *testing.T) {
	secret := "Bearer " + randHex(t)
	var ca []byte
	e := newNetProvider(t, func(n *NetworkConfig) {
		n.Credentials = func(string, provider.Network) []Credential {
			return []Credential{{Host: "pypi.org:443", Header: "Authorization", Value: secret}}
		}
		ca = n.Egress.(*egress.Proxy).CACertPEM()
		n.ProxyCA = ca
	})
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org", "evil.example"}}
	// A TLS client the sandbox's user configures keeps its own setting.
	sb := create(t, e.p, provider.Spec{ID: "egress-https", Network: policy, Env: map[string]string{"GIT_SSL_CAINFO": "/workspace/mine.pem"}})
	var out, errOut strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", trustProbe, string(e.tp.CAPEM)}, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: exit %d, %v; stderr: %s", res.ExitCode, err, errOut.String())
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		name, rest, _ := strings.Cut(line, " ")
		got[name] = rest
	}
	t.Logf("from inside the sandbox: %q", got)
	for name, want := range map[string]string{
		"pypi_body":   "ok pypi.org",
		"pypi_issuer": "ok berth egress proxy", // terminated, to add the credential
		"pypi_testca": "err SSLCertVerificationError",
		// Relayed: the host's own certificate, which the test CA alone
		// verifies and the default trust (system and proxy) does not.
		"evil_issuer":   "err SSLCertVerificationError",
		"evil_testca":   "ok berth nettest CA",
		"SSL_CERT_FILE": "ok /berth/ca-bundle.pem", "REQUESTS_CA_BUNDLE": "ok /berth/ca-bundle.pem",
		"PIP_CERT": "ok /berth/ca-bundle.pem", "CURL_CA_BUNDLE": "ok /berth/ca-bundle.pem",
		"NODE_EXTRA_CA_CERTS": "ok /berth/proxy-ca.pem", "GIT_SSL_CAINFO": "ok /workspace/mine.pem",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	var with int
	for _, r := range e.tp.Hosts["pypi.org"].Requests() {
		switch a := r.Header.Get("Authorization"); {
		case r.TLS && a == secret:
			with++
		case a != "":
			t.Errorf("pypi.org got Authorization %q over TLS %v", a, r.TLS)
		}
	}
	if with != 1 {
		t.Errorf("HTTPS requests with the credential: %d, want 1", with)
	}
	// The bundle is the system's, then the proxy's authority, and
	// neither the sandbox nor the sandbox's user can change it.
	bundle := shOut(t, sb, "cat /berth/ca-bundle.pem")
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if !strings.HasPrefix(bundle, string(system)) || !strings.HasSuffix(bundle, string(ca)) || len(system) == 0 {
		t.Errorf("the bundle (%d bytes) is not the host's system bundle (%d bytes) and the proxy's authority", len(bundle), len(system))
	}
	if r := providertestRun(t, sb, "/bin/sh", "-c", "echo x >> /berth/ca-bundle.pem"); r == 0 {
		t.Error("the sandbox wrote to its bundle")
	}
	// The secret: nowhere the sandbox can read.
	out.Reset()
	res, err = sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/usr/bin/python3", "-c", hexRuns + "\nfor d, _, fs in os.walk('/berth'):\n    print(len(fs), 'trust files')"}, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("hex runs: exit %d, %v; %s", res.ExitCode, err, errOut.String())
	}
	if strings.Contains(out.String(), secret[len("Bearer "):]) || !strings.Contains(out.String(), "2 trust files") {
		t.Errorf("hex runs: %q", out.String())
	}
}

func shOut(t *testing.T, sb provider.Sandbox, script string) string {
	t.Helper()
	var out, errOut strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: exit %d, %v; %s", script, res.ExitCode, err, errOut.String())
	}
	return out.String()
}
