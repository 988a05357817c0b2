package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider/e2b"
	"github.com/berth-dev/berth/provider/e2b/e2bfake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// e2bKey is the only API key the tests' fake E2B accepts.
const e2bKey = "e2b_cli_test_key"

// remoteImage builds remotefake's machine image once for the package.
var remoteImage = sync.OnceValue(func() error {
	out, err := exec.Command("../../provider/remote/remotefake/testdata/build-image.sh").CombinedOutput()
	if err != nil {
		return fmt.Errorf("build %s: %v\n%s", remotefake.DefaultImage, err, out)
	}
	return nil
})

// startE2B starts a fake E2B on loopback, its sandboxes containers of a
// farm of the test's own, and returns the fake and the flags and
// environment that make a berth dev serve it as provider e2b. The
// berth-sandboxd uploaded is the one built beside berth (berthBinary).
func startE2B(t *testing.T) (fake *e2bfake.Server, flags, env []string) {
	t.Helper()
	if err := remoteImage(); err != nil {
		t.Fatal(err)
	}
	farm, err := remotefake.NewFarm(context.WithoutCancel(t.Context()), remotefake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { farm.Close() })
	fake, err = e2bfake.New(context.WithoutCancel(t.Context()), e2bfake.Options{Farm: farm, APIKey: e2bKey})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the farm's, so run before it: the fake's
	// sandboxes go first.
	t.Cleanup(func() {
		fake.Close()
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("berth broke E2B's API:\n%s", strings.Join(v, "\n"))
		}
	})
	flags = []string{
		"--provider-config", "e2b.api-url=" + fake.URL(),
		"--provider-config", "e2b.sandbox-url=" + fake.SandboxURL(),
	}
	env = []string{"E2B_API_KEY=" + e2bKey, e2b.DefaultSecretEnv + "=the cli tests' secret"}
	return fake, flags, env
}

// e2bOps are the fake's operations berth uses: the control API's,
// envd's, and the port proxy's ("forward", one a request to the
// daemon).
var e2bOps = []string{
	"POST /sandboxes", "GET /v2/sandboxes", "GET /sandboxes/{sandboxID}", "DELETE /sandboxes/{sandboxID}",
	"POST /sandboxes/{sandboxID}/pause", "POST /sandboxes/{sandboxID}/connect", "POST /sandboxes/{sandboxID}/timeout",
	"POST /files", "POST /process.Process/Start", "POST /process.Process/SendSignal", "forward",
}

// tripsSince logs the requests each operation of the fake had since the
// last call, under step: the round trips to E2B of a berth operation.
func tripsSince(t *testing.T, fake *e2bfake.Server) func(step string) {
	last := map[string]int{}
	return func(step string) {
		t.Helper()
		var b strings.Builder
		for _, op := range e2bOps {
			n := fake.Requests(op)
			if d := n - last[op]; d > 0 {
				fmt.Fprintf(&b, "; %s: %d", op, d)
			}
			last[op] = n
		}
		t.Logf("E2B requests of %s%s", step, b.String())
	}
}

// providerLine is berth providers' row of provider name.
func providerLine(out, name string) string {
	for _, line := range lines(out) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return line
		}
	}
	return ""
}

// TestE2BWithoutKey starts berth dev with no E2B key: it serves its
// other providers, and berth providers shows e2b unavailable, naming
// the variable to set.
func TestE2BWithoutKey(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, []string{"E2B_API_KEY="}, berth, data, 0, &devLog)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	out := runOK(t, berth, "providers", "--address", fmt.Sprintf("127.0.0.1:%d", port))
	line := providerLine(out, "e2b")
	if f := strings.Fields(line); len(f) < 2 || f[1] != "unavailable" || !strings.Contains(line, "no API key in $E2B_API_KEY") {
		t.Errorf("berth providers:\n%s\nwant e2b unavailable, saying $E2B_API_KEY has no key", out)
	}
	if f := strings.Fields(providerLine(out, "linux")); len(f) < 2 || f[1] != "ready" {
		t.Errorf("berth providers:\n%s\nwant linux ready beside it", out)
	}
}

// TestE2BUnreachable starts berth dev serving e2b over an E2B that has
// stopped: berth providers shows e2b unreachable, in one line saying
// why and never the key, and linux ready beside it.
func TestE2BUnreachable(t *testing.T) {
	t.Parallel()
	fake, flags, env := startE2B(t)
	fake.Close()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, env, berth, data, 0, &devLog, flags...)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	start := time.Now()
	out := runOK(t, berth, "providers", "--address", addr)
	t.Logf("berth providers took %v:\n%s", time.Since(start), out)
	line := providerLine(out, "e2b")
	if f := strings.Fields(line); len(f) < 4 || f[1] != "unreachable" || !strings.Contains(line, "connection refused") {
		t.Errorf("berth providers:\n%s\nwant e2b unreachable, saying the connection was refused", out)
	}
	if f := strings.Fields(providerLine(out, "linux")); len(f) < 2 || f[1] != "ready" {
		t.Errorf("berth providers:\n%s\nwant linux ready beside it", out)
	}
	rows := decode[[]map[string]any](t, "providers -o json", runOK(t, berth, "providers", "--address", addr, "-o", "json"))
	found := false
	for _, r := range rows {
		if r["name"] == "e2b" {
			found = r["status"] == "unreachable" && r["service_kind"] == "ProviderUnavailable"
		}
	}
	if !found {
		t.Errorf("berth providers -o json: %v; want e2b unreachable, of kind ProviderUnavailable", rows)
	}
	if strings.Contains(out, e2bKey) || strings.Contains(devLog.String(), e2bKey) {
		t.Error("the API key is in berth providers' output or berth dev's log")
	}
}

// TestE2BCLI drives provider e2b, over a fake E2B, through the CLI as a
// user would: berth providers shows it ready; berth run gives a
// command's output and exit code; a standalone sandbox takes exec and
// cp both ways, and moves to linux and back with its workspace; a fork
// of it lives on linux; a session's tool call runs there.
func TestE2BCLI(t *testing.T) {
	t.Parallel()
	fake, flags, env := startE2B(t)
	model := fakemodel.New(t)
	env = append(env, "BERTH_MODEL="+fakemodel.Model, "OPENAI_BASE_URL="+model.URL, "OPENAI_API_KEY="+fakemodel.Key)
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, env, berth, data, 0, &devLog, flags...)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rm := func(id string) { exec.Command(berth, "--address", addr, "sandbox", "rm", id).Run() }
	ok := func(args ...string) string {
		t.Helper()
		return runOK(t, berth, append([]string{"--address", addr}, args...)...)
	}
	inspect := func(id string) (provider string) {
		t.Helper()
		return decode[struct {
			Provider string `json:"provider"`
		}](t, "inspect", ok("sandbox", "inspect", id, "-o", "json")).Provider
	}

	trips := tripsSince(t, fake)
	if line := providerLine(ok("providers"), "e2b"); !strings.HasPrefix(line, "e2b ") || !strings.Contains(line, " ready ") || !strings.Contains(line, "pause") {
		t.Errorf("berth providers shows e2b as %q; want ready, with pause", line)
	}

	out, errOut, code := runBerth(t, berth, "run", "--address", addr, "--provider", "e2b", "--",
		"sh", "-c", "echo out; echo err >&2; id -un; exit 7")
	if out != "out\nuser\n" || !strings.Contains(errOut, "err\n") || code != 7 {
		t.Errorf("berth run --provider e2b: stdout %q, stderr %q, exit %d; want out, the user E2B names (user), err, exit 7", out, errOut, code)
	}
	if n := fake.Requests("POST /sandboxes"); n == 0 {
		t.Errorf("berth run --provider e2b made no E2B sandbox")
	}
	trips("berth run (create, one command, destroy)")

	// E2B sizes a sandbox by its template: a size asked for is refused,
	// in one line saying so, not ignored.
	if _, errOut, code := runBerth(t, berth, "--address", addr, "sandbox", "create", "--provider", "e2b", "--memory", "1Gi"); code == 0 ||
		!strings.Contains(errOut, "template") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
		t.Errorf("sandbox create --provider e2b --memory 1Gi: exit %d, stderr %q; want one line on templates", code, errOut)
	}
	id := strings.TrimSpace(ok("sandbox", "create", "--provider", "e2b", "--no-idle-timeout"))
	t.Cleanup(func() { rm(id) })
	if p := inspect(id); p != "e2b" {
		t.Fatalf("sandbox create --provider e2b: provider %q", p)
	}
	trips("sandbox create, inspect")
	if out, errOut, code := runBerth(t, berth, "--address", addr, "sandbox", "exec", id, "--", "sh", "-c", "echo one; echo two >&2; exit 3"); out != "one\n" || errOut != "two\n" || code != 3 {
		t.Errorf("exec: stdout %q, stderr %q, exit %d", out, errOut, code)
	}
	trips("sandbox exec")
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "sub", "a.txt"), []byte("from the host\n"), 0o644)
	os.WriteFile(filepath.Join(tree, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	os.Symlink("sub/a.txt", filepath.Join(tree, "link"))
	ok("sandbox", "cp", tree, id+":proj")
	trips("sandbox cp in (a directory)")
	ok("sandbox", "exec", id, "--", "sh", "-c", "echo made in e2b > proj/made")
	want := "from the host\nran\nmade in e2b\n"
	check := func(sb, step string) {
		t.Helper()
		if got := ok("sandbox", "exec", sb, "--", "sh", "-c", "cat proj/link; proj/run.sh; cat proj/made"); got != want {
			t.Errorf("%s: the workspace shows %q, want %q", step, got, want)
		}
	}
	trips("sandbox exec")
	check(id, "cp in")
	trips("sandbox exec")
	back := t.TempDir()
	ok("sandbox", "cp", id+":proj", back)
	if b, err := os.ReadFile(filepath.Join(back, "proj", "made")); err != nil || string(b) != "made in e2b\n" {
		t.Errorf("cp out: %q, %v", b, err)
	}
	trips("sandbox cp out (a directory)")
	if fi, err := os.Stat(filepath.Join(back, "proj", "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("cp out, run.sh: %v, %v", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(back, "proj", "link")); err != nil || l != "sub/a.txt" {
		t.Errorf("cp out, link: %q, %v", l, err)
	}

	ok("sandbox", "switch", id, "--provider", "linux")
	trips("sandbox switch e2b to linux")
	if p := inspect(id); p != "linux" {
		t.Fatalf("after switch --provider linux: provider %q", p)
	}
	check(id, "e2b to linux (switch)")
	ok("sandbox", "exec", id, "--", "sh", "-c", "echo made on linux > proj/linux")
	ok("sandbox", "switch", id, "--provider", "e2b")
	trips("sandbox switch linux to e2b")
	if p := inspect(id); p != "e2b" {
		t.Fatalf("after switch --provider e2b: provider %q", p)
	}
	check(id, "linux to e2b (switch)")
	if got := ok("sandbox", "exec", id, "--", "sh", "-c", "cat proj/linux; id -un"); got != "made on linux\nuser\n" {
		t.Errorf("back on e2b: %q", got)
	}
	fork := strings.TrimSpace(ok("sandbox", "fork", id, "--provider", "linux"))
	t.Cleanup(func() { rm(fork) })
	if p := inspect(fork); p != "linux" {
		t.Fatalf("fork --provider linux: provider %q", p)
	}
	check(fork, "e2b to linux (fork)")
	trips("exec, fork to linux, exec")
	if out := ok("sandbox", "rm", id, fork); len(lines(out)) != 2 {
		t.Errorf("rm printed %q, want the two ids", out)
	}
	trips("sandbox rm")

	s := &sessionCLI{t: t, berth: berth, addr: addr, model: model, data: data}
	made := fake.Requests("POST /sandboxes")
	sid := strings.TrimSpace(s.ok("new", "--provider", "e2b"))
	model.Script(shellCall("c1", "echo 'print(6*7)' > main.py && python3 main.py && id -un"), fakemodel.Reply{Text: "It prints 42."})
	if out := s.ok("send", sid, "write", "main.py"); !strings.Contains(out, "  42\n  user\n") || !strings.HasSuffix(out, "It prints 42.\n") {
		t.Errorf("a session on e2b printed:\n%s\nwant the tool call's output (42, user) and the answer", out)
	}
	if fake.Requests("POST /sandboxes") == made {
		t.Errorf("the session's sandbox is not an E2B sandbox")
	}
	trips("session new, send (one tool call)")
	s.ok("rm", sid)
}
