package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// berth hands dev and worker to berth-host; without it, it says what to
// build, in one line, exit 125.
func TestHostBinaryMissing(t *testing.T) {
	dir := t.TempDir()
	alone := filepath.Join(dir, "berth")
	b, err := os.ReadFile(berthBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(alone, "dev", "--data-dir", t.TempDir())
	cmd.Env = []string{"PATH=" + dir}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitBerth {
		t.Fatalf("berth dev without berth-host: %v, want exit %d\n%s", err, exitBerth, out)
	}
	msg := strings.TrimSpace(string(out))
	if strings.Count(msg, "\n") > 0 || !strings.Contains(msg, "berth-host") || !strings.Contains(msg, "go build") {
		t.Fatalf("want one line naming berth-host and how to build it, got:\n%s", msg)
	}
}

// The host's commands take berth's connection flags before or after
// their name, their help reads as berth's, and bad settings are one-line
// errors.
func TestHostCommands(t *testing.T) {
	berth := berthBinary(t)
	out, _, code := runBerth(t, berth, "worker", "--help")
	if code != 0 || !strings.Contains(out, "berth worker [flags]") || !strings.Contains(out, "--provider-config") || !strings.Contains(out, "--address") {
		t.Fatalf("worker --help: exit %d\n%s", code, out)
	}
	// berth dev's help names the model's variables, and not the
	// connection flags of the client commands: its server is its own.
	out, _, code = runBerth(t, berth, "dev", "--help")
	if code != 0 || strings.Contains(out, "--address") || strings.Contains(out, "--retry-for") {
		t.Errorf("dev --help lists client flags: exit %d\n%s", code, out)
	}
	for _, v := range []string{"BERTH_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"} {
		if !strings.Contains(out, v) {
			t.Errorf("dev --help does not mention %s:\n%s", v, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"worker", "--data-dir", t.TempDir(), "--address", "127.0.0.1:1"}, exitBerth, "cannot reach the Temporal server at 127.0.0.1:1"},
		{[]string{"--address", "127.0.0.1:2", "worker", "--data-dir", t.TempDir()}, exitBerth, "cannot reach the Temporal server at 127.0.0.1:2"},
		{[]string{"worker", "--provider", "nosuch", "--data-dir", t.TempDir()}, 2, `unknown provider "nosuch"`},
		{[]string{"--address", "127.0.0.1:1", "worker", "--provider-config", "nodot=1", "--data-dir", t.TempDir()}, 2, "NAME.KEY=VALUE"},
		{[]string{"dev", "--no-such-flag"}, 2, "unknown flag: --no-such-flag\nRun 'berth dev --help' for usage."},
		// A bad --metrics-address is refused before anything starts; one
		// taken, before the host starts.
		{[]string{"worker", "--metrics-address", "9090", "--data-dir", t.TempDir()}, 2, `--metrics-address "9090": want HOST:PORT`},
		{[]string{"dev", "--metrics-address", "127.0.0.1:http", "--data-dir", t.TempDir()}, 2, `--metrics-address "127.0.0.1:http": port "http" is not a number`},
		{[]string{"worker", "--metrics-address", taken, "--address", "127.0.0.1:1", "--data-dir", t.TempDir()}, exitBerth, "--metrics-address: listen tcp " + taken},
		{[]string{"dev", "--metrics-address", taken, "--port", "0", "--data-dir", t.TempDir()}, exitBerth, "--metrics-address: listen tcp " + taken},
		// Usage errors name the help of the command that was mistaken.
		{[]string{"sandbox", "exec"}, 2, "Run 'berth sandbox exec --help' for usage."},
		{[]string{"run", "--memory", "lots", "--", "true"}, 2, "Run 'berth run --help' for usage."},
		{[]string{"nosuch"}, 2, "Run 'berth --help' for usage."},
	} {
		_, stderr, code := runBerth(t, berth, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("berth %v: exit %d, want %d with %q\n%s", tt.args, code, tt.code, tt.want, stderr)
		}
		// One line says what is wrong (a usage error adds where the help is).
		if lines := strings.Split(strings.TrimSpace(stderr), "\n"); strings.Contains(tt.want, "--metrics-address") &&
			(!strings.Contains(lines[0], tt.want) || len(lines) > 2) {
			t.Errorf("berth %v: want one line saying %q, got:\n%s", tt.args, tt.want, stderr)
		}
	}
}
