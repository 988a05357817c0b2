package hostnettest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/egress"
	"github.com/berth-dev/berth/provider/internal/egresstest"
	"github.com/berth-dev/berth/provider/internal/hostnet"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

// fetch runs http(s)://pypi.org/ fetches in sb, printing "<scheme> ok
// <body>" or "<scheme> err <exception>"; https verifies against the
// test CA alone (argv[1]).
const fetch = `
import ssl, sys, urllib.request
open("/tmp/testca.pem", "w").write(sys.argv[1])
for scheme in sys.argv[2:]:
    try:
        ctx = ssl.create_default_context(cafile="/tmp/testca.pem") if scheme == "https" else None
        print(scheme, "ok", urllib.request.urlopen(scheme + "://pypi.org/", timeout=5, context=ctx).read().decode().strip())
    except Exception as e:
        print(scheme, "err", type(e).__name__)
`

func (e *Env) fetch(t *testing.T, sb provider.Sandbox, schemes ...string) string {
	t.Helper()
	return strings.TrimSpace(python(t, sb, fetch, append([]string{string(e.TP.CAPEM)}, schemes...)...))
}

// python runs program in sb with args, failing the test unless it
// exits 0, and returns what it printed.
func python(t *testing.T, sb provider.Sandbox, program string, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Argv: append([]string{"/usr/bin/python3", "-c", program}, args...), Stdout: &out, Stderr: &errOut})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("python3: exit %d, %v; stderr: %s", res.ExitCode, err, errOut.String())
	}
	return out.String()
}

// testAfterRestart: the host process restarts, and with it the proxy,
// which knows no sandbox; the sandboxes and their links live on. The
// provider opened anew registers them with the new proxy, and their
// names work again.
func testAfterRestart(t *testing.T, h Harness) {
	e := h.open(t, -1, nil, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-restart", Network: policy})
	if got := e.fetch(t, sb, "http"); got != "http ok pypi.org" {
		t.Fatalf("before: %q", got)
	}
	e.Proxy.Close()
	fresh, _ := egresstest.Start(t, e.TP, Port, nil)
	if got := e.fetch(t, sb, "http"); strings.HasPrefix(got, "http ok") {
		t.Fatalf("a proxy that knows no sandbox relayed: %q", got)
	}
	n := e.config()
	n.Egress = fresh
	h.Open(t, Config{Pool: -1, Network: n, StateDir: e.P.StateDir()})
	if got := e.fetch(t, sb, "http"); got != "http ok pypi.org" {
		t.Errorf("after the provider opened again: %q", got)
	}
	if s := fresh.Stats(); s.Refused[egress.ReasonUnknownSource] == 0 {
		t.Errorf("the fresh proxy's refusals = %v, want the unknown source", s.Refused)
	}
}

// testCredentialPerSandbox: a credential the host gives one sandbox is
// added on its way to pypi.org, on the port it names alone (HTTPS to
// pypi.org stays end to end), and never to another sandbox's; the
// sandbox's environment, its files and the provider's state hold no
// trace of it.
func testCredentialPerSandbox(t *testing.T, h Harness) {
	secret := "Bearer " + RandHex(t)
	e := h.open(t, -1, func(n *hostnet.NetworkConfig) {
		n.Credentials = func(id string, _ provider.Network) []hostnet.Credential {
			if id != "egress-cred" {
				return nil
			}
			return []hostnet.Credential{{Host: "pypi.org:80", Header: "Authorization", Value: secret}}
		}
	}, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-cred", Network: policy})
	other := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-nocred", Network: policy})
	for _, s := range []provider.Sandbox{sb, other} {
		if got := e.fetch(t, s, "http", "https"); got != "http ok pypi.org\nhttps ok pypi.org" {
			t.Fatalf("fetch: %q", got)
		}
	}
	var with, without int
	for _, r := range e.TP.Hosts["pypi.org"].Requests() {
		switch a := r.Header.Get("Authorization"); {
		case r.TLS && a != "":
			t.Error("the credential went over HTTPS, which it does not apply to")
		case r.TLS:
		case a == secret:
			with++
		case a == "":
			without++
		default:
			t.Errorf("pypi.org got Authorization %q", a)
		}
	}
	if with != 1 || without != 1 {
		t.Errorf("HTTP requests with the credential %d, without %d; want 1 and 1", with, without)
	}
	if out := python(t, sb, hexRuns); strings.Contains(out, secret[len("Bearer "):]) || !strings.Contains(out, "files ") {
		t.Errorf("the sandbox's hex runs: %q", out)
	}
	e.noSecret(t, secret)
}

// noSecret fails the test if any file the provider keeps (its records,
// its network's state; the first MiB of each file under its state
// directory but its image cache) holds the secret.
func (e *Env) noSecret(t *testing.T, secret string) {
	t.Helper()
	read := 0
	err := filepath.WalkDir(e.P.StateDir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a sandbox's directory going as its walked
		}
		if d.IsDir() && d.Name() == ".images" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return nil
		}
		defer f.Close()
		b := make([]byte, 1<<20)
		n, _ := f.Read(b)
		read++
		if strings.Contains(string(b[:n]), secret) {
			t.Errorf("%s holds the credential", path)
		}
		return nil
	})
	if err != nil || read == 0 {
		t.Errorf("read %d files of the state directory: %v", read, err)
	}
}

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
for d, _, fs in os.walk("/berth"):
    print("trust_files", "ok", len(fs))
`

// testTrust: with the proxy's authority given to its sandboxes, a
// credential reaches pypi.org over HTTPS, from a client that verifies
// with its default trust; evil.example, allowed without a credential,
// is still relayed untouched and its own certificate verified; the
// bundle is the root's system bundle and the authority, which the
// sandbox cannot change; a TLS client the sandbox's user configures
// keeps its setting.
func testTrust(t *testing.T, h Harness) {
	secret := "Bearer " + RandHex(t)
	var ca []byte
	e := h.open(t, -1, func(n *hostnet.NetworkConfig) {
		n.Credentials = func(string, provider.Network) []hostnet.Credential {
			return []hostnet.Credential{{Host: "pypi.org:443", Header: "Authorization", Value: secret}}
		}
		ca = n.Egress.(*egress.Proxy).CACertPEM()
		n.ProxyCA = ca
	}, nil)
	policy := provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org", "evil.example"}}
	sb := sandboxtest.Create(t, e.P, provider.Spec{ID: "egress-https", Network: policy, Env: map[string]string{"GIT_SSL_CAINFO": "/workspace/mine.pem"}})
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(python(t, sb, trustProbe, string(e.TP.CAPEM))), "\n") {
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
		"trust_files": "ok 2",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	var with int
	for _, r := range e.TP.Hosts["pypi.org"].Requests() {
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
	// The bundle is the root's system bundle (the host's, for a root
	// made of the host's files, or none), then the proxy's authority,
	// and the sandbox's user cannot change it.
	bundle := sandboxtest.Sh(t, sb, "cat /berth/ca-bundle.pem")
	system, _ := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if before, ok := strings.CutSuffix(bundle, string(ca)); !ok || before != "" && before != string(system) && before != string(system)+"\n" {
		t.Errorf("the bundle (%d bytes) is not the root's system bundle (the host's is %d bytes) and the proxy's authority", len(bundle), len(system))
	}
	if r := run(t, sb, "/bin/sh", "-c", "echo x >> /berth/ca-bundle.pem"); r == 0 {
		t.Error("the sandbox wrote to its bundle")
	}
	if r := run(t, sb, "/bin/sh", "-c", "echo x > /berth/mine.pem"); r == 0 {
		t.Error("the sandbox wrote into /berth")
	}
	if out := python(t, sb, hexRuns); strings.Contains(out, secret[len("Bearer "):]) || !strings.Contains(out, "files ") {
		t.Errorf("the sandbox's hex runs: %q", out)
	}
}

// hexRuns prints the runs of 32 hex digits in the sandbox's environment
// and in the files it can read under /etc, /tmp, /home, /root, /berth
// and its workspace (the first MiB of each), then how many files it
// read.
const hexRuns = `
import os, re
pat = re.compile(rb"[0-9a-f]{32}")
found = set(pat.findall("\n".join(k + "=" + v for k, v in os.environ.items()).encode()))
n = 0
for top in ["/etc", "/tmp", "/home", "/root", "/berth", "."]:
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
