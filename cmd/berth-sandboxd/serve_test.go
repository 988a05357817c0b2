package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/remote/remoteinit"
	"github.com/berth-dev/berth/sandboxd"
)

// freePort finds a loopback TCP port no one listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestServe runs `berth-sandboxd serve` in the installed binary as the
// remote provider starts it: it makes its workspace, serves with the
// token on the port it was given and refuses what lacks it, and the
// token is neither in its argv, nor in its environment as /proc shows
// it, nor in any command's.
func TestServe(t *testing.T) {
	bin := build(t)
	const token = "tok-3f9a1c77d2e8b0a6"
	ws := filepath.Join(t.TempDir(), "ws")
	port := freePort(t)
	cfg, _ := json.Marshal(remoteinit.Config{Token: token, Workspace: ws, UID: os.Geteuid(), GID: os.Getegid(),
		Env: map[string]string{"FROM_SPEC": "yes"}, ExpiresAt: time.Now().Add(time.Hour)})
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(port))
	cmd.Env = append(os.Environ(), remoteinit.ConfigEnv+"="+string(cfg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	c, err := sandboxd.NewHTTPClient(base, http.Header{"Authorization": {"Bearer " + token}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not answer: %v; stderr %q", err, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		t.Fatalf("the workspace was not made: %v", err)
	}

	var out bytes.Buffer
	res, err := c.Exec(t.Context(), provider.ExecRequest{Shell: `echo "$FROM_SPEC"; env; cat /proc/$PPID/environ /proc/$PPID/cmdline`, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v, exit %d", err, res.ExitCode)
	}
	if !strings.HasPrefix(out.String(), "yes\n") {
		t.Errorf("the spec's environment does not reach commands: %q", out.String())
	}
	if strings.Contains(out.String(), token) {
		t.Errorf("a command sees the token in its environment or the daemon's")
	}
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(token)) {
			t.Errorf("the token is in the daemon's /proc/PID/%s", f)
		}
	}
	ps, err := exec.Command("ps", "-eo", "args").Output()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(ps, []byte(token)) {
		t.Errorf("ps shows the token")
	}

	// The test runs as root, with every capability: the daemon gives
	// commands a cgroup namespace of their own.
	out.Reset()
	if _, err := c.Exec(t.Context(), provider.ExecRequest{Argv: []string{"cat", "/proc/self/cgroup"}, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(out.String()) {
		if parts := strings.SplitN(strings.TrimSpace(line), ":", 3); len(parts) == 3 && parts[2] != "/" && os.Geteuid() == 0 {
			t.Errorf("a command sees its cgroup as %q, want / (a cgroup namespace of its own):\n%s", parts[2], out.String())
			break
		}
	}

	anon, err := sandboxd.NewHTTPClient(base, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Exec(t.Context(), provider.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrProviderAuth) {
		t.Errorf("exec without the token: %v, want ErrProviderAuth", err)
	}
}

// TestServeRefuses: serve without its configuration, or with one that
// has no token, exits 1 with one line on stderr, and never echoes the
// configuration.
func TestServeRefuses(t *testing.T) {
	bin := build(t)
	for _, tt := range []struct{ name, config, want string }{
		{"none", "", "no $" + remoteinit.ConfigEnv},
		{"no token", `{"workspace":"/tmp/x"}`, "no token"},
		{"not json", `{"token":"leaky-secret"`, "not a configuration in JSON"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), bin, "serve", "--listen", "127.0.0.1:0")
			cmd.Env = os.Environ()
			if tt.config != "" {
				cmd.Env = append(cmd.Env, remoteinit.ConfigEnv+"="+tt.config)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("serve: %v, want exit 1; output %q", err, out)
			}
			msg := strings.TrimSpace(string(out))
			if !strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") || strings.Contains(msg, "leaky-secret") {
				t.Errorf("serve said %q, want one line with %q and no token", msg, tt.want)
			}
		})
	}
}
