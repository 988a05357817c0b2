package providertest

import (
	"github.com/berth-dev/berth/internal/randid"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

func execTests() []test {
	return []test{
		// First, while no parallel test runs: it sets an environment
		// variable in the test process.
		{name: "CleanEnv", serial: true, fn: testCleanEnv},
		{name: "Command", fn: testCommand},
		{name: "StdoutStderr", fn: testStdoutStderr},
		{name: "Stdin", fn: testStdin},
		{name: "NilStdin", fn: testNilStdin},
		{name: "Env", fn: testEnv},
		{name: "Dir", fn: testDir},
		{name: "SpecDir", fn: testSpecDir},
		{name: "CommandNotFound", fn: testCommandNotFound},
		{name: "BadRequest", fn: testBadRequest},
		{name: "NonRoot", fn: testNonRoot},
		{name: "NoNetwork", fn: testNoNetwork},
		{name: "NetworkNotOffered", fn: testNetworkNotOffered},
		{name: "Loopback", fn: testLoopback},
		{name: "Streaming", fn: testStreaming},
		{name: "BinaryOutput", fn: testBinaryOutput},
		{name: "ByteCounts", fn: testByteCounts},
		{name: "Signal", fn: testSignal},
		{name: "Concurrent", fn: testConcurrentExec},
		{name: "Timeout", fn: testTimeout},
		{name: "SignalCommand", fn: testSignalCommand},
		{name: "Terminal", fn: testTerminal},
	}
}

func testCommand(t *testing.T, s *suite) {
	tests := []struct {
		name                   string
		req                    provider.ExecRequest
		wantStdout, wantStderr string
		wantExit               int
	}{
		{name: "Argv", req: provider.ExecRequest{Argv: []string{"echo", "hello", "world"}}, wantStdout: "hello world\n"},
		{name: "ArgvKeepsSpaces", req: provider.ExecRequest{Argv: []string{"printf", "%s|", "a b", " c "}}, wantStdout: "a b| c |"},
		{name: "ArgvIsNotShell", req: provider.ExecRequest{Argv: []string{"echo", "$HOME", "*", ";", "`id`"}}, wantStdout: "$HOME * ; `id`\n"},
		{name: "ArgvAbsolute", req: provider.ExecRequest{Argv: []string{"/bin/echo", "abs"}}, wantStdout: "abs\n"},
		{name: "Shell", req: provider.ExecRequest{Shell: "echo a | tr a b; echo c >&2"}, wantStdout: "b\n", wantStderr: "c\n"},
		{name: "ShellExitCode", req: provider.ExecRequest{Shell: "exit 3"}, wantExit: 3},
		{name: "ShellExit255", req: provider.ExecRequest{Shell: "echo partial; exit 255"}, wantStdout: "partial\n", wantExit: 255},
		{name: "ArgvExitCode", req: provider.ExecRequest{Argv: []string{"false"}}, wantExit: 1},
		// The shell exists, so this is the shell's exit status, not an error.
		{name: "ShellCommandNotFound", req: provider.ExecRequest{Shell: "{ no-such-cmd-xyz; } 2>/dev/null"}, wantExit: 127},
	}
	_, sb := s.sandbox(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := execute(t, sb, tt.req)
			if err != nil {
				t.Fatalf("Exec: got error %v, want nil: a non-zero exit code alone is not an error", err)
			}
			if r.ExitCode != tt.wantExit {
				t.Errorf("ExitCode = %d, want %d (stderr %q)", r.ExitCode, tt.wantExit, r.stderr)
			}
			if r.Signal != "" {
				t.Errorf("Signal = %q, want none", r.Signal)
			}
			if r.stdout != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", r.stdout, tt.wantStdout)
			}
			if r.stderr != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", r.stderr, tt.wantStderr)
			}
		})
	}
}

// testStdoutStderr interleaves the streams heavily, so a provider that
// merges them, or drops output at the end, shows it.
func testStdoutStderr(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	const n = 50000
	r := run(t, sb, python, "-c", `
import sys
for i in range(int(sys.argv[1])):
    sys.stdout.write("out %d\n" % i)
    sys.stderr.write("err %d\n" % i)
    if i % 1000 == 0:
        sys.stdout.flush()
        sys.stderr.flush()
`, strconv.Itoa(n))
	if r.ExitCode != 0 {
		t.Fatalf("exit code %d, stderr %s", r.ExitCode, tail(r.stderr))
	}
	var wantOut, wantErr strings.Builder
	for i := range n {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	if r.stdout != wantOut.String() {
		t.Errorf("stdout is not exactly the %d lines written to it: got %d bytes, want %d; ends %q", n, len(r.stdout), wantOut.Len(), tail(r.stdout))
	}
	if r.stderr != wantErr.String() {
		t.Errorf("stderr is not exactly the %d lines written to it: got %d bytes, want %d; ends %q", n, len(r.stderr), wantErr.Len(), tail(r.stderr))
	}
}

// testStdin sends more than a pipe holds, so a provider that does not feed
// stdin while it drains stdout deadlocks here.
func testStdin(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	in := make([]byte, 4<<20)
	rand.NewChaCha8([32]byte{1}).Read(in)
	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{"cat"}, Stdin: bytes.NewReader(in)})
	if err != nil {
		t.Fatalf("Exec cat with %d bytes of stdin: %v", len(in), err)
	}
	if r.ExitCode != 0 {
		t.Errorf("cat exit code %d, stderr %q", r.ExitCode, r.stderr)
	}
	if r.stdout != string(in) {
		t.Errorf("cat echoed %d bytes of stdin, want the %d bytes sent, byte for byte", len(r.stdout), len(in))
	}

	r, err = execute(t, sb, provider.ExecRequest{Shell: "wc -l", Stdin: strings.NewReader("a\nb\nc\n")})
	if err != nil {
		t.Fatalf("Exec wc -l: %v", err)
	}
	if strings.TrimSpace(r.stdout) != "3" {
		t.Errorf("wc -l of three lines of stdin printed %q, want 3", r.stdout)
	}
}

func testNilStdin(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	ctx, cancel := context.WithTimeout(t.Context(), settleTimeout)
	defer cancel()
	r, err := executeCtx(ctx, sb, provider.ExecRequest{Argv: []string{"cat"}})
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cat with a nil Stdin did not end within %v: a nil Stdin must be an empty input, closed at once", settleTimeout)
	}
	if err != nil {
		t.Fatalf("Exec cat: %v", err)
	}
	if r.ExitCode != 0 || r.stdout != "" {
		t.Errorf("cat with a nil Stdin: exit code %d, stdout %q; want 0 and nothing", r.ExitCode, r.stdout)
	}
}

func testEnv(t *testing.T, s *suite) {
	p := s.open(t)
	spec := s.newSpec(t)
	spec.Env = map[string]string{
		"BERTH_A":     "from spec",
		"BERTH_B":     "from spec, overridden",
		"BERTH_ODD":   "has = and\nnewline and 'quotes' and $dollar",
		"BERTH_EMPTY": "",
	}
	sb := s.mustCreate(t, p, spec)

	tests := []struct {
		name string
		env  map[string]string
		want map[string]*string
	}{
		{
			name: "SpecOnly",
			want: map[string]*string{
				"BERTH_A":     ptr("from spec"),
				"BERTH_B":     ptr("from spec, overridden"),
				"BERTH_ODD":   ptr(spec.Env["BERTH_ODD"]),
				"BERTH_EMPTY": ptr(""),
				"BERTH_C":     nil,
			},
		},
		{
			name: "RequestOverridesSpec",
			env:  map[string]string{"BERTH_B": "from request", "BERTH_C": "only in request"},
			want: map[string]*string{
				"BERTH_A": ptr("from spec"),
				"BERTH_B": ptr("from request"),
				"BERTH_C": ptr("only in request"),
			},
		},
		{
			// A request's environment is for that request alone.
			name: "RequestEnvDoesNotStick",
			want: map[string]*string{"BERTH_B": ptr("from spec, overridden"), "BERTH_C": nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sandboxEnv(t, sb, tt.env)
			for k, want := range tt.want {
				v, ok := got[k]
				switch {
				case want == nil && ok:
					t.Errorf("$%s = %q, want it unset", k, v)
				case want != nil && !ok:
					t.Errorf("$%s is unset, want %q", k, *want)
				case want != nil && v != *want:
					t.Errorf("$%s = %q, want %q", k, v, *want)
				}
			}
			if _, ok := got["PATH"]; !ok {
				t.Errorf("$PATH is unset: a program name without a slash is looked up in the sandbox's PATH")
			}
		})
	}
}

func ptr(s string) *string { return &s }

// sandboxEnv returns the environment a command sees.
func sandboxEnv(t *testing.T, sb provider.Sandbox, env map[string]string) map[string]string {
	t.Helper()
	r, err := execute(t, sb, provider.ExecRequest{
		Argv: []string{python, "-c", "import json, os; print(json.dumps(dict(os.environ)))"},
		Env:  env,
	})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("dumping the environment: err %v, exit code %d, stderr %q", err, r.ExitCode, r.stderr)
	}
	got := map[string]string{}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("decoding the environment %q: %v", r.stdout, err)
	}
	return got
}

// testCleanEnv checks that nothing of the caller's environment, where
// credentials live, reaches a sandbox unless passed explicitly.
func testCleanEnv(t *testing.T, s *suite) {
	const name = "BERTH_PROVIDERTEST_SECRET"
	secret := "secret-" + randid.Hex(8)
	if !setenv(t, name, secret) {
		t.Skip("skipped: cannot set an environment variable in the test process, because Run was called from a parallel test")
	}
	_, sb := s.sandbox(t)
	for k, v := range sandboxEnv(t, sb, nil) {
		if k == name || strings.Contains(v, secret) {
			t.Errorf("the test process's environment leaked into the sandbox: $%s = %q", k, v)
		}
	}
}

// setenv is t.Setenv, reporting instead of panicking when a parallel
// ancestor forbids it.
func setenv(t *testing.T, key, value string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	t.Setenv(key, value)
	return true
}

func testDir(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	mustSh(t, sb, "mkdir -p /workspace/sub/deeper")
	tests := []struct {
		dir, want string
	}{
		{"", provider.Workspace},
		{"sub", provider.Workspace + "/sub"},
		{"sub/deeper", provider.Workspace + "/sub/deeper"},
		{"/workspace/sub", provider.Workspace + "/sub"},
		{"/workspace", provider.Workspace},
		{".", provider.Workspace},
	}
	for _, tt := range tests {
		r, err := execute(t, sb, provider.ExecRequest{Argv: []string{"pwd"}, Dir: tt.dir})
		if err != nil {
			t.Errorf("pwd with Dir %q: %v", tt.dir, err)
			continue
		}
		if got := strings.TrimSuffix(r.stdout, "\n"); got != tt.want {
			t.Errorf("pwd with Dir %q printed %q, want %q", tt.dir, got, tt.want)
		}
	}
}

func testSpecDir(t *testing.T, s *suite) {
	p := s.open(t)
	spec := s.newSpec(t)
	spec.Dir = "start/here"
	sb := s.mustCreate(t, p, spec)
	// The provider may or may not create the directory; make sure it is
	// there, from a directory that surely exists.
	if _, err := execute(t, sb, provider.ExecRequest{Shell: "mkdir -p start/here", Dir: provider.Workspace}); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	r := run(t, sb, "pwd")
	if got, want := strings.TrimSuffix(r.stdout, "\n"), provider.Workspace+"/start/here"; got != want {
		t.Errorf("with Spec.Dir %q, pwd printed %q, want %q", spec.Dir, got, want)
	}
	r, err := execute(t, sb, provider.ExecRequest{Argv: []string{"pwd"}, Dir: "/workspace/start"})
	if err != nil {
		t.Fatalf("pwd with Dir: %v", err)
	}
	if got, want := strings.TrimSuffix(r.stdout, "\n"), provider.Workspace+"/start"; got != want {
		t.Errorf("ExecRequest.Dir should override Spec.Dir: pwd printed %q, want %q", got, want)
	}
}

func testCommandNotFound(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	for _, argv := range [][]string{
		{"no-such-cmd-xyz"},
		{"no-such-cmd-xyz", "with", "args"},
		{"/usr/bin/no-such-cmd-xyz"},
		{"./no-such-cmd-xyz"},
	} {
		_, err := execute(t, sb, provider.ExecRequest{Argv: argv})
		what := fmt.Sprintf("Exec %q", argv)
		checkErrIs(t, err, errdefs.ErrCommandNotFound, what)
		checkErrIs(t, err, errdefs.ErrBadInput, what)
	}
	checkServing(t, sb)
}

func testBadRequest(t *testing.T, s *suite) {
	touch := func(name string) []string { return []string{"touch", provider.Workspace + "/ran-" + name} }
	tests := []struct {
		name string
		req  provider.ExecRequest
	}{
		{"NoCommand", provider.ExecRequest{}},
		{"ArgvAndShell", provider.ExecRequest{Argv: touch("ArgvAndShell"), Shell: "touch /workspace/ran-ArgvAndShell2"}},
		{"EmptyProgram", provider.ExecRequest{Argv: []string{"", "x"}}},
		{"NULInArgument", provider.ExecRequest{Argv: []string{"touch", "/workspace/ran-NULInArgument\x00x"}}},
		{"NULInShell", provider.ExecRequest{Shell: "touch /workspace/ran-NULInShell\x00"}},
		{"IDDotDot", provider.ExecRequest{ID: "../x", Argv: touch("IDDotDot")}},
		{"IDSlash", provider.ExecRequest{ID: "a/b", Argv: touch("IDSlash")}},
		{"IDLeadingDash", provider.ExecRequest{ID: "-x", Argv: touch("IDLeadingDash")}},
		{"IDTooLong", provider.ExecRequest{ID: strings.Repeat("a", provider.MaxIDLen+1), Argv: touch("IDTooLong")}},
		{"NegativeTimeout", provider.ExecRequest{Timeout: -time.Second, Argv: touch("NegativeTimeout")}},
		{"NegativeStdoutOffset", provider.ExecRequest{StdoutOffset: -1, Argv: touch("NegativeStdoutOffset")}},
		{"NegativeStderrOffset", provider.ExecRequest{StderrOffset: -1, Argv: touch("NegativeStderrOffset")}},
		{"DirDotDot", provider.ExecRequest{Dir: "../tmp", Argv: touch("DirDotDot")}},
		{"DirOutside", provider.ExecRequest{Dir: "/tmp", Argv: touch("DirOutside")}},
		{"EnvNameWithEquals", provider.ExecRequest{Env: map[string]string{"A=B": "x"}, Argv: touch("EnvNameWithEquals")}},
		{"EnvNameEmpty", provider.ExecRequest{Env: map[string]string{"": "x"}, Argv: touch("EnvNameEmpty")}},
		{"EnvValueNUL", provider.ExecRequest{Env: map[string]string{"A": "x\x00y"}, Argv: touch("EnvValueNUL")}},
	}
	_, sb := s.sandbox(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := execute(t, sb, tt.req)
			checkErrIs(t, err, errdefs.ErrBadInput, "Exec of a malformed request")
		})
	}
	if out := mustSh(t, sb, "ls -A /workspace | grep '^ran-' || true"); out != "" {
		t.Errorf("malformed requests ran anyway; they left: %s", out)
	}
	checkServing(t, sb)
}

func testNonRoot(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	r := run(t, sb, "id", "-u")
	uid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("id -u printed %q (stderr %q)", r.stdout, r.stderr)
	}
	if uid == 0 {
		t.Errorf("commands run as uid 0; they must run as an unprivileged user")
	}
}

// testNoNetwork checks NetworkNone, the default: a loopback interface of
// the sandbox's own and nothing else, and no route. A listener on the
// host's loopback is the easiest thing for a sandbox that shares the
// host's network to reach. The test sends nothing to any other address:
// with no interface but lo and no route, nothing else is reachable.
func testNoNetwork(t *testing.T, s *suite) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening on the host: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	_, sb := s.sandbox(t)
	out := mustPython(t, sb, `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    print("connected to the host's loopback")
except OSError as e:
    print("no connection to 127.0.0.1: %s" % e)
finally:
    s.close()
print("interfaces: " + " ".join(sorted(name for _, name in socket.if_nameindex())))
routes = 0
for path in ("/proc/net/route", "/proc/net/ipv6_route"):
    try:
        with open(path) as f:
            for line in f.read().splitlines():
                fields = line.split()
                # /proc/net/route has a header; loopback routes are lo's.
                if fields and fields[0] != "Iface" and "lo" not in fields:
                    routes += 1
                    print("route: " + line)
    except OSError:
        pass
print("routes: %d" % routes)
`, port)
	t.Logf("from the sandbox:\n%s", out)
	if strings.Contains(out, "connected to") {
		t.Errorf("a sandbox with the default network policy (NetworkNone) made a TCP connection out:\n%s", out)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the host's loopback listener accepted %d connections from the sandbox", n)
	}
	if !strings.Contains(out, "routes: 0\n") {
		t.Errorf("with NetworkNone the sandbox has a route:\n%s", out)
	}
	if !strings.Contains(out, "interfaces: lo\n") {
		t.Errorf("with NetworkNone the sandbox should have a loopback interface and nothing else:\n%s", out)
	}
}

func testLoopback(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	out := mustPython(t, sb, `
import socket
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0))
srv.listen(1)
cli = socket.create_connection(srv.getsockname(), timeout=5)
conn, _ = srv.accept()
cli.sendall(b"ping")
print(conn.recv(4).decode())
`)
	if out != "ping\n" {
		t.Errorf("a TCP round trip over the sandbox's loopback gave %q, want %q", out, "ping\n")
	}
}

func testStreaming(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	stdout, stderr := newSignalWriter(), newSignalWriter()
	ctx := timeout(t, opTimeout)
	_, err := sb.Exec(ctx, provider.ExecRequest{
		Shell:  "echo first; echo efirst >&2; sleep 2; echo second; echo esecond >&2",
		Stdout: stdout,
		Stderr: stderr,
	})
	returned := time.Now()
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	for _, w := range []struct {
		name string
		w    *signalWriter
		want string
	}{{"Stdout", stdout, "first\nsecond\n"}, {"Stderr", stderr, "efirst\nesecond\n"}} {
		if got := w.w.String(); got != w.want {
			t.Errorf("%s received %q, want %q", w.name, got, w.want)
			continue
		}
		// The command slept 2s between its lines; output that streams
		// reaches the writer about that long before Exec returns.
		lead := returned.Sub(time.Unix(0, w.w.at.Load()))
		if lead < time.Second {
			t.Errorf("the first line reached %s only %v before Exec returned: output must be streamed as it is produced, not held until the command ends", w.name, lead)
		}
	}
}

func testBinaryOutput(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	t.Run("Random", func(t *testing.T) {
		r, err := execute(t, sb, provider.ExecRequest{Shell: "head -c 1000000 /dev/urandom | tee /workspace/r | cat"})
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("Exec: err %v, exit code %d, stderr %q", err, r.ExitCode, r.stderr)
		}
		want := readFile(t, sb, "r")
		if len(want) != 1000000 {
			t.Fatalf("the command's copy of its output is %d bytes, want 1000000", len(want))
		}
		if r.stdout != string(want) {
			t.Errorf("random output changed on its way: got %d bytes, want the %d the command wrote to its file, byte for byte", len(r.stdout), len(want))
		}
		if r.StdoutBytes != int64(len(want)) {
			t.Errorf("StdoutBytes = %d, want %d", r.StdoutBytes, len(want))
		}
	})
	t.Run("EveryByteValue", func(t *testing.T) {
		r := run(t, sb, python, "-c", `
import sys
sys.stdout.buffer.write(bytes(range(256)) * 64)
sys.stderr.buffer.write(bytes(range(255, -1, -1)) * 64)
`)
		var up, down []byte
		for range 64 {
			for i := range 256 {
				up = append(up, byte(i))
				down = append(down, byte(255-i))
			}
		}
		if r.stdout != string(up) {
			t.Errorf("stdout of every byte value (invalid UTF-8 included) came back changed: %s", describe([]byte(r.stdout)))
		}
		if r.stderr != string(down) {
			t.Errorf("stderr of every byte value (invalid UTF-8 included) came back changed: %s", describe([]byte(r.stderr)))
		}
	})
}

func testByteCounts(t *testing.T, s *suite) {
	tests := []struct {
		name          string
		shell         string
		stdout, stder int64
	}{
		{"Small", "printf abc; printf defgh >&2", 3, 5},
		{"None", "true", 0, 0},
		{"Large", "head -c 300000 /dev/zero; head -c 70000 /dev/zero >&2", 300000, 70000},
	}
	_, sb := s.sandbox(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := execute(t, sb, provider.ExecRequest{Shell: tt.shell})
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if r.StdoutBytes != tt.stdout || int64(len(r.stdout)) != tt.stdout {
				t.Errorf("StdoutBytes = %d and %d bytes received, want %d", r.StdoutBytes, len(r.stdout), tt.stdout)
			}
			if r.StderrBytes != tt.stder || int64(len(r.stderr)) != tt.stder {
				t.Errorf("StderrBytes = %d and %d bytes received, want %d", r.StderrBytes, len(r.stderr), tt.stder)
			}
		})
	}
}

func testSignal(t *testing.T, s *suite) {
	tests := []struct {
		name     string
		shell    string
		signaled bool
		exit     int
	}{
		{"SIGKILL", "kill -9 $$", true, -1},
		{"SIGTERM", "kill -TERM $$", true, -1},
		// A shell reports a child killed by signal 9 as 137; a command
		// that exits 137 itself was not signalled.
		{"Exit137", "exit 137", false, 137},
	}
	_, sb := s.sandbox(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := execute(t, sb, provider.ExecRequest{Shell: tt.shell})
			if err != nil {
				t.Fatalf("Exec: got error %v, want nil: a command ended by a signal is a result, not an error", err)
			}
			if r.ExitCode != tt.exit {
				t.Errorf("ExitCode = %d, want %d", r.ExitCode, tt.exit)
			}
			if got := r.Signal != ""; got != tt.signaled {
				t.Errorf("Signal = %q; want it set: %v", r.Signal, tt.signaled)
			}
		})
	}
	checkServing(t, sb)
}

// testConcurrentExec checks that one handle serves several commands at once
// and keeps their outputs apart.
func testConcurrentExec(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	const n = 6
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			lines := 2000 * (i + 1)
			r, err := execute(t, sb, provider.ExecRequest{
				Argv:  []string{"/bin/sh", "-c", `seq 1 "$2" | sed "s/^/$1-/"; echo "$1" >&2`, "sh", strconv.Itoa(i), strconv.Itoa(lines)},
				Stdin: strings.NewReader("ignored"),
			})
			if err != nil {
				t.Errorf("concurrent Exec %d: %v", i, err)
				return
			}
			var want strings.Builder
			for j := 1; j <= lines; j++ {
				fmt.Fprintf(&want, "%d-%d\n", i, j)
			}
			if r.stdout != want.String() {
				t.Errorf("concurrent Exec %d: stdout is %d bytes ending %q, want %d bytes ending %q",
					i, len(r.stdout), tail(r.stdout), want.Len(), tail(want.String()))
			}
			if r.stderr != strconv.Itoa(i)+"\n" {
				t.Errorf("concurrent Exec %d: stderr %q, want %q", i, r.stderr, strconv.Itoa(i)+"\n")
			}
		})
	}
	wg.Wait()
}

// orphanMarker tags processes the timeout tests start, so the process scan
// can find them. The scanner spells it in two parts, so as not to find
// itself.
const orphanMarker = "berth-orphan"

// scanProcesses lists the sandbox's processes that are sleep or carry
// orphanMarker, one per line.
const scanProcesses = `
import os
marker = b"berth-" + b"orphan"
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        continue
    if os.path.basename(argv[0]) == b"sleep" or marker in argv:
        print(pid, b" ".join(argv).decode(errors="replace"))
`

func testTimeout(t *testing.T, s *suite) {
	tests := []struct {
		name, shell string
	}{
		{"BackgroundChild", "sleep 30 & sleep 30"},
		{"NewSession", python + ` -c 'import os, time
if os.fork():
    os._exit(0)
os.setsid()
time.sleep(30)' ` + orphanMarker + ` & sleep 30`},
		{"IgnoresSIGTERM", "trap '' TERM; sleep 30 & sleep 30"},
	}
	p := s.open(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sb := s.mustCreate(t, p, s.newSpec(t))
			start := time.Now()
			r, err := execute(t, sb, provider.ExecRequest{Shell: tt.shell, Timeout: 500 * time.Millisecond})
			elapsed := time.Since(start)
			checkErrIs(t, err, errdefs.ErrTimeout, "Exec past its Timeout")
			if !r.TimedOut {
				t.Errorf("ExecResult.TimedOut = false for a command ended by its Timeout")
			}
			if elapsed > 10*time.Second {
				t.Errorf("Exec with a 500ms Timeout took %v to return", elapsed)
			}
			eventually(t, 5*time.Second, "every process the timed-out command started is gone", func() (bool, string) {
				out := mustPython(t, sb, scanProcesses)
				return out == "", "still running:\n" + out
			})
			checkServing(t, sb)
		})
	}
}

// tail shortens long output to its end, for failure messages.
func tail(s string) string {
	const max = 200
	if len(s) <= max {
		return s
	}
	return "..." + s[len(s)-max:]
}

// testNetworkNotOffered checks that a provider refuses, rather than
// ignores, a network policy it does not offer.
func testNetworkNotOffered(t *testing.T, s *suite) {
	caps := s.open(t).Capabilities()
	policies := map[string]struct {
		offered bool
		net     provider.Network
	}{
		"Open":  {caps.Network, provider.Network{Mode: provider.NetworkOpen}},
		"Allow": {caps.NetworkAllow, provider.Network{Mode: provider.NetworkAllow, Hosts: []string{"pypi.org"}}},
	}
	for name, pol := range policies {
		if pol.offered {
			continue
		}
		t.Run(name, func(t *testing.T) {
			spec := s.adjust(s.newSpec(t))
			spec.Network = pol.net
			sb, err := s.open(t).Create(timeout(t, opTimeout), spec)
			if err == nil {
				destroyOnCleanup(t, sb)
			}
			checkErrIs(t, err, errdefs.ErrUnsupported, "Create with a network policy the provider does not offer")
		})
	}
}
