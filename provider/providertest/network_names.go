package providertest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-dev/berth/provider"
)

// The name-based cases: a sandbox whose allow list names hosts, tried
// as an attacker would. They need NetworkTargets' names (AllowedName,
// UnlistedName) to resolve on the provider's host to Allowed's and
// Unlisted's addresses, and each host to serve TLS for its name on
// TLSPort with a certificate of HostCA.

// HostRequest is an HTTP request a test host served.
type HostRequest struct {
	TLS    bool
	Host   string
	Header http.Header
}

// NetworkCredential is a credential the provider's host holds and adds
// to requests to Name (a test host serving HTTP and TLS, with a body
// holding its name, as Allowed does); its sandboxes trust the proxy's
// authority.
type NetworkCredential struct {
	Name, Header, Value string
}

func nameTests() []test {
	return []test{
		{name: "AllowHost", serial: true, fn: testAllowHost},
		{name: "ForgedSNI", serial: true, fn: testForgedSNI},
		{name: "ForgedHost", serial: true, fn: testForgedHost},
		{name: "IPLiteral", serial: true, fn: testIPLiteral},
		{name: "UnlistedPort", serial: true, fn: testUnlistedPort},
		{name: "Rebinding", serial: true, fn: testRebinding},
		{name: "IPv6", serial: true, fn: testIPv6},
		{name: "RawSockets", serial: true, fn: testRawSockets},
		{name: "ProxyExhaustion", serial: true, fn: testProxyExhaustion},
		{name: "Credential", serial: true, fn: testCredential},
	}
}

// nameProbe runs cases from inside a sandbox, printing one line for
// each: "<case> ok <what came back>" or "<case> err <exception>
// <errno>". Its first argument is the JSON of probeConfig.
const nameProbe = `
import json, socket, ssl, sys, urllib.request
cfg = json.loads(sys.argv[1])
open("/tmp/hostca.pem", "w").write(cfg["ca"])
A, U = cfg["allowed"], cfg["unlisted"]

def verified():
    return ssl.create_default_context(cafile="/tmp/hostca.pem")  # the test hosts' CA alone

def unverified():
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx

def raw(host, port, req, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((host, port))
    s.sendall(req.encode())
    out = b""
    while len(out) < 65536:
        b = s.recv(4096)
        if not b:
            break
        out += b
    return out.decode(errors="replace")

def get(host):
    return "GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % host

def http_name():
    return urllib.request.urlopen("http://%s:%d/" % (A, cfg["http"]), timeout=5).read().decode()

def https_name():
    with urllib.request.urlopen("https://%s:%d/" % (A, cfg["tls"]), timeout=5, context=verified()) as r:
        return r.read().decode()

def unlisted_name():
    return str(socket.getaddrinfo(U, cfg["http"]))

def udp_name():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"hello", (A, cfg["udp"]))
    return s.recv(512).decode()

def udp_addr():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"hello", (cfg["allowed_addr"], cfg["udp"]))
    return s.recv(512).decode()

def sni_forged():
    # To the address A resolves to, with U's name in the ClientHello.
    s = socket.create_connection((A, cfg["tls"]), timeout=5)
    t = unverified().wrap_socket(s, server_hostname=U)
    t.sendall(get(U).encode())
    return t.recv(4096).decode()

def sni_forged_addr():
    # To U's own address, with A's name in the ClientHello.
    s = socket.create_connection((cfg["unlisted_addr"], cfg["tls"]), timeout=5)
    t = unverified().wrap_socket(s, server_hostname=A)
    t.sendall(get(A).encode())
    return t.recv(4096).decode()

def host_forged():
    return raw(cfg["unlisted_addr"], cfg["http"], get(A))

def host_forged_unlisted():
    return raw(A, cfg["http"], get(U))

def literal_http():
    return raw(cfg["allowed_addr"], cfg["http"], get(cfg["allowed_addr"]))

def literal_tls():
    s = socket.create_connection((cfg["allowed_addr"], cfg["tls"]), timeout=5)
    t = unverified().wrap_socket(s)  # no server name at all
    t.sendall(get(cfg["allowed_addr"]).encode())
    return t.recv(4096).decode()

def port_unlisted():
    return raw(A, cfg["other"], get(A))

def port_unlisted_addr():
    return raw(cfg["allowed_addr"], cfg["other"], get(A))

def connect_unlisted():
    # A CONNECT, on a connection the rules let through, for a port they
    # do not: what answers must not be a tunnel to it.
    return raw(A, cfg["http"], "CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (A, cfg["other"], A, cfg["other"]) + get(A))

def ipv6_doc():
    return raw("2001:db8::10", cfg["http"], get(A), socket.AF_INET6)

def ipv6_mapped():
    return raw("::ffff:" + cfg["forbidden_addr"], cfg["http"], get(A), socket.AF_INET6)

def ipv6_udp():
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.settimeout(2)
    s.sendto(b"hello", ("::ffff:" + cfg["forbidden_addr"], cfg["udp"]))
    return s.recv(512).decode()

def raw_ip():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, 253)
    return "opened"

def raw_icmp():
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    return "opened"

def packet():
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0x0300)
    return "opened"

for name in sys.argv[2:]:
    try:
        print(name, "ok", globals()[name]().replace("\r", " ").replace("\n", " ").strip())
    except Exception as e:
        print(name, "err", type(e).__name__, getattr(e, "errno", "") or "")
    sys.stdout.flush()
`

// probeConfig is what nameProbe is told of the targets.
func (s *suite) probeConfig() string {
	n := s.h.Network
	forbidden := n.Forbidden[n.Listable]
	for _, a := range n.Forbidden {
		if !forbidden.IsValid() {
			forbidden = a
		}
	}
	b, _ := json.Marshal(map[string]any{
		"ca":             string(n.HostCA),
		"allowed":        n.AllowedName,
		"unlisted":       n.UnlistedName,
		"allowed_addr":   n.Allowed.Addr().String(),
		"unlisted_addr":  n.Unlisted.Addr().String(),
		"forbidden_addr": forbidden.Addr().String(),
		"http":           n.Allowed.Port(),
		"tls":            n.TLSPort,
		"udp":            n.UDPPort,
		"other":          n.OtherPort,
	})
	return string(b)
}

// probeNames runs nameProbe's cases in sb.
func (s *suite) probeNames(t *testing.T, sb provider.Sandbox, cases ...string) map[string]string {
	t.Helper()
	out := mustPython(t, sb, nameProbe, append([]string{s.probeConfig()}, cases...)...)
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, rest, _ := strings.Cut(line, " ")
		got[name] = rest
	}
	if len(got) != len(cases) {
		t.Fatalf("probe printed %q for %v", out, cases)
	}
	t.Logf("from inside the sandbox: %q", got)
	return got
}

// refusal says whether a probe's line is a network error, not an answer
// and not a fault of the probe itself (a NameError would pass for a
// refusal otherwise).
func refusal(line string) bool {
	if strings.TrimSpace(line) == "ok" { // closed without a word
		return true
	}
	kind, _, _ := strings.Cut(strings.TrimPrefix(line, "err "), " ")
	switch kind {
	case "SSLZeroReturnError", "SSLEOFError", "SSLError", "ConnectionResetError", "ConnectionAbortedError",
		"ConnectionRefusedError", "BrokenPipeError", "RemoteDisconnected", "URLError", "OSError", "TimeoutError",
		"gaierror", "HTTPError", "PermissionError":
		return strings.HasPrefix(line, "err ")
	}
	return false
}

// answered says whether a probe's line is an answer that names name
// (every test host's body is its name).
func answered(line, name string) bool {
	return strings.HasPrefix(line, "ok") && strings.Contains(line, name)
}

// hostsSkip is networkSkip for the name-based cases, which need the
// names and the test hosts' CA too.
func (s *suite) hostsSkip(t *testing.T) provider.Provider {
	t.Helper()
	p := s.networkSkip(t, false)
	if n := s.h.Network; n.AllowedName == "" || n.UnlistedName == "" || len(n.HostCA) == 0 || n.TLSPort == 0 {
		t.Skip("skipped: the harness names no test hosts by name (NetworkTargets.AllowedName, UnlistedName, HostCA, TLSPort)")
	}
	return p
}

func (s *suite) hostPolicy(names ...string) provider.Network {
	return provider.Network{Mode: provider.NetworkAllow, Hosts: names}
}

// notReached fails the test if the unlisted or a forbidden host saw
// anything of a sandbox.
func (s *suite) notReached(t *testing.T) {
	t.Helper()
	n := s.h.Network
	if n.Reached == nil {
		return
	}
	if n.Reached(n.Unlisted.Addr()) {
		t.Errorf("%s (%s) was reached", n.UnlistedName, n.Unlisted.Addr())
	}
	for name, a := range n.Forbidden {
		if n.Reached(a.Addr()) {
			t.Errorf("%s (%s) was reached", name, a.Addr())
		}
	}
}

// requests are the requests the host of name served, nil without
// NetworkTargets.Requests.
func (s *suite) requests(name string) []HostRequest {
	if s.h.Network.Requests == nil {
		return nil
	}
	return s.h.Network.Requests(name)
}

// checkRequests fails the test if a request the host of name served
// after the first from (those of the cases before) was for another
// host.
func (s *suite) checkRequests(t *testing.T, name string, from int) {
	t.Helper()
	reqs := s.requests(name)
	for _, r := range reqs[min(from, len(reqs)):] {
		if host, _, _ := strings.Cut(r.Host, ":"); host != name {
			t.Errorf("%s got a request for %q", name, r.Host)
		}
	}
}

// testAllowHost: a listed name works over HTTP and HTTPS, relayed to
// its own server (whose certificate the test CA alone verifies); an
// unlisted name does not resolve; UDP goes nowhere but to CIDR rules'
// ranges.
func testAllowHost(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	sb := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	before := len(s.requests(n.AllowedName))
	got := s.probeNames(t, sb, "http_name", "https_name", "unlisted_name", "udp_name", "udp_addr")
	for _, c := range []string{"http_name", "https_name"} {
		if !answered(got[c], n.AllowedName) {
			t.Errorf("%s: %q, want %s's answer", c, got[c], n.AllowedName)
		}
	}
	for _, c := range []string{"unlisted_name", "udp_name", "udp_addr"} {
		if !refusal(got[c]) {
			t.Errorf("%s: %q, want a network error", c, got[c])
		}
	}
	s.checkRequests(t, n.AllowedName, before)
	s.notReached(t)
}

// testForgedSNI: a ClientHello naming an unlisted host is refused, sent
// to whichever address; one naming the listed host, sent to the
// unlisted host's address, reaches the listed host's server alone.
func testForgedSNI(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	sb := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	got := s.probeNames(t, sb, "sni_forged", "sni_forged_addr")
	if !refusal(got["sni_forged"]) {
		t.Errorf("sni_forged: %q, want a network error", got["sni_forged"])
	}
	if r := got["sni_forged_addr"]; strings.Contains(r, n.UnlistedName) || !(refusal(r) || answered(r, n.AllowedName)) {
		t.Errorf("sni_forged_addr: %q, want %s's answer or a refusal", r, n.AllowedName)
	}
	s.notReached(t)
}

// testForgedHost: the proxy decides by the name and never by the
// address: a Host of the listed name aimed at the unlisted host's
// address reaches the listed host; an unlisted Host aimed at the
// listed one is refused.
func testForgedHost(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	sb := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	before := len(s.requests(n.AllowedName))
	got := s.probeNames(t, sb, "host_forged", "host_forged_unlisted")
	if r := got["host_forged"]; strings.Contains(r, n.UnlistedName) || !(refusal(r) || answered(r, n.AllowedName)) {
		t.Errorf("host_forged: %q, want %s's answer or a refusal", r, n.AllowedName)
	}
	if r := got["host_forged_unlisted"]; strings.Contains(r, n.UnlistedName) || !(refusal(r) || strings.Contains(r, " 403 ") || strings.Contains(r, " 502 ")) {
		t.Errorf("host_forged_unlisted: %q, want a refusal", r)
	}
	s.checkRequests(t, n.AllowedName, before)
	s.notReached(t)
}

// testIPLiteral: an address in place of a name (an IP literal Host, TLS
// without a server name) is no name the list allows.
func testIPLiteral(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	sb := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	got := s.probeNames(t, sb, "literal_http", "literal_tls")
	for c, r := range got {
		if answered(r, n.AllowedName) || !(refusal(r) || strings.Contains(r, " 403 ")) {
			t.Errorf("%s: %q, want a refusal", c, r)
		}
	}
}

// testUnlistedPort: the listed name on a port the rule does not name,
// directly or through a CONNECT on an allowed connection, gets nowhere.
func testUnlistedPort(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	if n.OtherPort == 0 || n.Hits == nil {
		t.Skip("skipped: the harness names no unlisted port its hosts serve (NetworkTargets.OtherPort, Hits)")
	}
	sb := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	got := s.probeNames(t, sb, "port_unlisted", "port_unlisted_addr", "connect_unlisted")
	for _, c := range []string{"port_unlisted", "port_unlisted_addr"} {
		if !refusal(got[c]) {
			t.Errorf("%s: %q, want a network error", c, got[c])
		}
	}
	if r := got["connect_unlisted"]; strings.Contains(r, " 200 Connection established") || strings.HasPrefix(r, "ok HTTP/1.1 200") && !strings.Contains(r, n.AllowedName) {
		t.Errorf("connect_unlisted: %q, a tunnel", r)
	}
	if hits := n.Hits(n.AllowedName, n.OtherPort); hits != 0 {
		t.Errorf("%s's port %d saw %d connections", n.AllowedName, n.OtherPort, hits)
	}
}

// testRebinding: the listed name resolves, on the host, to a forbidden
// address (the metadata service, a private host, the host's own): the
// proxy checks what it resolves and dials only that, so it refuses and
// none sees a byte; back to the name's own address, it works again.
func testRebinding(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	if n.Rebind == nil {
		t.Skip("skipped: the harness cannot rebind a name (NetworkTargets.Rebind)")
	}
	sb := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	for name, to := range n.Forbidden {
		t.Run("to "+name, func(t *testing.T) {
			restore := n.Rebind(n.AllowedName, to.Addr())
			defer restore()
			got := s.probeNames(t, sb, "http_name", "https_name")
			for c, r := range got {
				if !refusal(r) {
					t.Errorf("%s after rebinding to %s: %q, want a network error", c, to.Addr(), r)
				}
			}
			s.notReached(t)
		})
	}
	if got := s.probeNames(t, sb, "http_name"); !answered(got["http_name"], n.AllowedName) {
		t.Errorf("after rebinding back: %q", got["http_name"])
	}
}

// testIPv6: no IPv6 leaves a sandbox, nor IPv4 dressed as IPv6 (a
// v4-mapped address on an IPv6 socket) to a forbidden host, under the
// most open policy.
func testIPv6(t *testing.T, s *suite) {
	p := s.networkSkip(t, true)
	if len(s.h.Network.Forbidden) == 0 {
		t.Skip("skipped: the harness names no forbidden host (NetworkTargets.Forbidden)")
	}
	sb := s.netSandbox(t, p, provider.Network{Mode: provider.NetworkOpen})
	got := s.probeNames(t, sb, "ipv6_doc", "ipv6_mapped", "ipv6_udp")
	for c, r := range got {
		if !refusal(r) {
			t.Errorf("%s: %q, want a network error", c, r)
		}
	}
	s.notReached(t)
}

// testRawSockets: a sandbox's user opens no raw or packet socket, under
// the most open policy.
func testRawSockets(t *testing.T, s *suite) {
	p := s.networkSkip(t, true)
	sb := s.netSandbox(t, p, provider.Network{Mode: provider.NetworkOpen})
	got := s.probeNames(t, sb, "raw_ip", "raw_icmp", "packet")
	for c, r := range got {
		if !refusal(r) {
			t.Errorf("%s: %q, want the socket refused", c, r)
		}
	}
}

// exhaustProbe opens argv[2] connections to argv[1]:80 and holds them,
// printing "held <n>" once it has tried them all; once its standard
// input closes it sends a request on each and prints how many were
// answered.
const exhaustProbe = `
import socket, sys
host, n = sys.argv[1], int(sys.argv[2])
conns = []
for i in range(n):
    try:
        conns.append(socket.create_connection((host, 80), timeout=1))
    except OSError:
        pass
print("held", len(conns), flush=True)
sys.stdin.read()
answered = 0
for c in conns:
    try:
        c.settimeout(5)
        c.sendall(("GET / HTTP/1.0\r\nHost: %s\r\n\r\n" % host).encode())
        if host in c.recv(4096).decode(errors="replace"):
            answered += 1
    except OSError:
        pass
print("answered", answered, flush=True)
`

// testProxyExhaustion: a sandbox holding more connections than the
// proxy gives one sandbox gets no more than that bound answered, and
// another sandbox is served meanwhile.
func testProxyExhaustion(t *testing.T, s *suite) {
	p := s.hostsSkip(t)
	n := s.h.Network
	if n.MaxProxyConns == 0 {
		t.Skip("skipped: the harness names no bound on a sandbox's proxy connections (NetworkTargets.MaxProxyConns)")
	}
	hog := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	other := s.netSandbox(t, p, s.hostPolicy(n.AllowedName))
	stdin, release := io.Pipe()
	out := newSignalWriter() // the probe's first line is "held"
	done := make(chan error, 1)
	var res provider.ExecResult
	go func() {
		var err error
		res, err = hog.Exec(timeout(t, opTimeout), provider.ExecRequest{
			Argv:  []string{python, "-c", exhaustProbe, n.AllowedName, itoa(n.MaxProxyConns + 8)},
			Stdin: stdin, Stdout: out})
		done <- err
	}()
	select {
	case <-out.first:
	case err := <-done:
		release.Close()
		t.Fatalf("the probe ended before holding its connections: %v, %+v: %q", err, res, out.String())
	}
	got := s.probeNames(t, other, "http_name")
	release.Close()
	if err := <-done; err != nil || res.ExitCode != 0 {
		t.Fatalf("exhaust probe: %v, exit %d: %q", err, res.ExitCode, out.String())
	}
	if !answered(got["http_name"], n.AllowedName) {
		t.Errorf("a sandbox beside one that holds its every proxy connection: %q", got["http_name"])
	}
	var held, ans int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if v, ok := strings.CutPrefix(line, "held "); ok {
			held = atoi(v)
		}
		if v, ok := strings.CutPrefix(line, "answered "); ok {
			ans = atoi(v)
		}
	}
	t.Logf("the hog held %d connections, of which %d were answered (bound %d)", held, ans, n.MaxProxyConns)
	if ans > n.MaxProxyConns || ans == 0 {
		t.Errorf("%d of the hog's connections were answered, want 1 to %d", ans, n.MaxProxyConns)
	}
}

// credProbe fetches https://<argv[1]>/ and http://<argv[1]>/ with the
// default trust (the sandbox's own, SSL_CERT_FILE among it), then
// prints the runs of 32 hex digits it finds in its environment, in
// every process's command line and environment it can read, and in the
// files it can read under /etc, /tmp, /home, /root, /berth and its
// workspace (the first MiB of each), then how many files it read.
const credProbe = `
import os, re, sys, urllib.request
name = sys.argv[1]
for scheme in ["https", "http"]:
    try:
        print(scheme, "ok", urllib.request.urlopen(scheme + "://" + name + "/", timeout=5).read().decode().strip())
    except Exception as e:
        print(scheme, "err", type(e).__name__, e)
pat = re.compile(rb"[0-9a-f]{32}")
found = set(pat.findall("\n".join(k + "=" + v for k, v in os.environ.items()).encode()))
n = 0
paths = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        paths += ["/proc/%s/cmdline" % pid, "/proc/%s/environ" % pid]
for top in ["/etc", "/tmp", "/home", "/root", "/berth", "."]:
    for d, _, files in os.walk(top):
        paths += [os.path.join(d, f) for f in files]
for p in paths:
    try:
        if not p.startswith("/proc") and (not os.path.isfile(p) or os.path.islink(p)):
            continue
        with open(p, "rb") as fh:
            found.update(pat.findall(fh.read(1 << 20)))
        n += 1
    except OSError:
        pass
for h in sorted(found):
    print("hex", h.decode())
print("files", n)
`

// testCredential: the host's credential reaches its host over HTTPS
// (the proxy terminating it, the sandbox trusting the proxy by
// default) and over HTTP; the sandbox never holds it: not in its
// environment, not in any process's command line or environment, not
// in a file it can read. The credential's value must hold a run of 32
// hex digits, which is what the sandbox looks for, never told the
// value.
func testCredential(t *testing.T, s *suite) {
	p := s.networkSkip(t, false)
	n := s.h.Network
	c := n.Credential
	if !p.Capabilities().NetworkCredentials {
		t.Skipf("skipped: provider %q adds no credentials (Capabilities.NetworkCredentials is false)", p.Name())
	}
	if c == nil || n.Requests == nil {
		t.Skip("skipped: the harness names no credential (NetworkTargets.Credential, Requests)")
	}
	secret := hexRun.FindString(c.Value)
	if secret == "" {
		t.Fatalf("the harness's credential holds no run of 32 hex digits")
	}
	sb := s.netSandbox(t, p, s.hostPolicy(c.Name))
	out := mustPython(t, sb, credProbe, c.Name)
	t.Logf("from inside the sandbox: %q", out)
	for _, scheme := range []string{"https", "http"} {
		if !strings.Contains(out, scheme+" ok "+c.Name) {
			t.Errorf("%s://%s/: want its answer", scheme, c.Name)
		}
	}
	if strings.Contains(out, secret) {
		t.Error("the sandbox can read the credential")
	}
	if !strings.Contains(out, "\nfiles ") {
		t.Errorf("the probe read no files")
	}
	var tls, plain int
	for _, r := range n.Requests(c.Name) {
		switch v := r.Header.Get(c.Header); {
		case v == c.Value && r.TLS:
			tls++
		case v == c.Value:
			plain++
		default:
			t.Errorf("%s got %s %q (TLS %v)", c.Name, c.Header, v, r.TLS)
		}
	}
	if tls != 1 || plain != 1 {
		t.Errorf("%s got the credential over HTTPS %d times and HTTP %d, want once each", c.Name, tls, plain)
	}
}
