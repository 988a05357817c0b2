package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/proto"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider/daytona"
	"github.com/berth-dev/berth/provider/daytona/daytonafake"
	"github.com/berth-dev/berth/provider/remote/remotefake"
)

// daytonaKey is the only API key the tests' fake Daytona accepts:
// distinctive, so that a test can look for it.
const daytonaKey = "dtn_cli_test_key_5f0c2a9e71d4"

// startDaytona starts a fake Daytona on loopback, its sandboxes
// containers of a farm of the test's own, and returns the fake and the
// flags and environment that make a berth dev serve it as provider
// daytona. The berth-sandboxd uploaded is the one built beside berth.
func startDaytona(t *testing.T) (fake *daytonafake.Server, flags, env []string) {
	t.Helper()
	if err := remoteImage(); err != nil {
		t.Fatal(err)
	}
	farm, err := remotefake.NewFarm(context.WithoutCancel(t.Context()), remotefake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { farm.Close() })
	fake, err = daytonafake.New(context.WithoutCancel(t.Context()), daytonafake.Options{Farm: farm, APIKey: daytonaKey})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the farm's, so run before it: the fake's
	// sandboxes go first.
	t.Cleanup(func() {
		fake.Close()
		if v := fake.Violations(); len(v) > 0 {
			t.Errorf("berth broke Daytona's API:\n%s", strings.Join(v, "\n"))
		}
	})
	flags = []string{"--provider-config", "daytona.api-url=" + fake.APIURL()}
	env = []string{daytona.DefaultAPIKeyEnv + "=" + daytonaKey, daytona.DefaultSecretEnv + "=the cli tests' daytona secret"}
	return fake, flags, env
}

// daytonaOps are the operations the fake serves, named as its Requests
// counts them: the control API's, the toolbox's ("/toolbox/..."), and
// the preview proxy's ("preview", one a request to the daemon).
var daytonaOps = []string{
	"POST /sandbox", "GET /sandbox", "GET /sandbox/paginated",
	"GET /sandbox/{sandboxIdOrName}", "DELETE /sandbox/{sandboxIdOrName}",
	"POST /sandbox/{sandboxIdOrName}/start", "POST /sandbox/{sandboxIdOrName}/stop", "POST /sandbox/{sandboxIdOrName}/archive",
	"POST /sandbox/{sandboxIdOrName}/autostop/{interval}", "POST /sandbox/{sandboxIdOrName}/autoarchive/{interval}",
	"POST /sandbox/{sandboxIdOrName}/autodelete/{interval}", "POST /sandbox/{sandboxId}/last-activity",
	"PUT /sandbox/{sandboxIdOrName}/labels", "GET /sandbox/{sandboxIdOrName}/ports/{port}/preview-url",
	"GET /sandbox/{sandboxId}/toolbox-proxy-url",
	"GET /toolbox/{sandboxId}/user-home-dir", "GET /toolbox/{sandboxId}/work-dir", "GET /toolbox/{sandboxId}/version",
	"POST /toolbox/{sandboxId}/files/upload", "GET /toolbox/{sandboxId}/files/download",
	"POST /toolbox/{sandboxId}/files/folder", "POST /toolbox/{sandboxId}/files/permissions",
	"GET /toolbox/{sandboxId}/files/info", "DELETE /toolbox/{sandboxId}/files",
	"POST /toolbox/{sandboxId}/process/execute",
	"POST /toolbox/{sandboxId}/process/session", "GET /toolbox/{sandboxId}/process/session",
	"GET /toolbox/{sandboxId}/process/session/{sessionId}", "DELETE /toolbox/{sandboxId}/process/session/{sessionId}",
	"POST /toolbox/{sandboxId}/process/session/{sessionId}/exec",
	"GET /toolbox/{sandboxId}/process/session/{sessionId}/command/{commandId}",
	"GET /toolbox/{sandboxId}/process/session/{sessionId}/command/{commandId}/logs",
	"preview", "unauthorized", "unrouted",
}

// daytonaTripsSince is tripsSince for the fake Daytona: it logs the
// requests each operation had since the last call, under step.
func daytonaTripsSince(t *testing.T, fake *daytonafake.Server) func(step string) {
	last := map[string]int{}
	return func(step string) {
		t.Helper()
		var b strings.Builder
		total := 0
		for _, op := range daytonaOps {
			n := fake.Requests(op)
			if d := n - last[op]; d > 0 {
				fmt.Fprintf(&b, "; %s: %d", op, d)
				total += d
			}
			last[op] = n
		}
		t.Logf("Daytona requests of %s: %d%s", step, total, b.String())
	}
}

// TestDaytonaWithoutKey starts berth dev with no Daytona key: it serves
// its other providers, and berth providers shows daytona unavailable,
// naming the variable to set.
func TestDaytonaWithoutKey(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, []string{daytona.DefaultAPIKeyEnv + "="}, berth, data, 0, &devLog)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	out := runOK(t, berth, "providers", "--address", fmt.Sprintf("127.0.0.1:%d", port))
	line := providerLine(out, "daytona")
	if f := strings.Fields(line); len(f) < 2 || f[1] != "unavailable" || !strings.Contains(line, "$"+daytona.DefaultAPIKeyEnv) {
		t.Errorf("berth providers:\n%s\nwant daytona unavailable, naming $%s", out, daytona.DefaultAPIKeyEnv)
	}
	if f := strings.Fields(providerLine(out, "linux")); len(f) < 2 || f[1] != "ready" {
		t.Errorf("berth providers:\n%s\nwant linux ready beside it", out)
	}
}

// TestDaytonaCLI drives provider daytona, over a fake Daytona, through
// the CLI as a user would: berth providers shows it ready; a standalone
// sandbox made on daytona takes a directory copied in and commands; a
// fork of it lives on linux; it moves to e2b (a fake E2B beside) and
// back, its workspace whole at each step. The API key, which only berth
// dev's environment holds, is in no output, log or workflow history.
func TestDaytonaCLI(t *testing.T) {
	t.Parallel()
	fake, flags, env := startDaytona(t)
	_, e2bFlags, e2bEnv := startE2B(t)
	flags, env = append(flags, e2bFlags...), append(env, e2bEnv...)
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, env, berth, data, 0, &devLog, flags...)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rm := func(id string) { exec.Command(berth, "--address", addr, "sandbox", "rm", id).Run() }
	var printed bytes.Buffer // all the commands printed, to look for the key in
	run := func(args ...string) (string, string, int) {
		t.Helper()
		out, errOut, code := runBerth(t, berth, append([]string{"--address", addr}, args...)...)
		printed.WriteString(out + errOut)
		return out, errOut, code
	}
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := run(args...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	inspect := func(id string) (provider string) {
		t.Helper()
		return decode[struct {
			Provider string `json:"provider"`
		}](t, "inspect", ok("sandbox", "inspect", id, "-o", "json")).Provider
	}

	trips := daytonaTripsSince(t, fake)
	if line := providerLine(ok("providers"), "daytona"); !strings.HasPrefix(line, "daytona ") || !strings.Contains(line, " ready ") {
		t.Errorf("berth providers shows daytona as %q; want ready", line)
	}
	trips("berth providers")

	id := strings.TrimSpace(ok("sandbox", "create", "--provider", "daytona", "--no-idle-timeout"))
	t.Cleanup(func() { rm(id) })
	if p := inspect(id); p != "daytona" {
		t.Fatalf("sandbox create --provider daytona: provider %q", p)
	}
	if n := len(fake.Sandboxes()); n != 1 {
		t.Fatalf("after sandbox create --provider daytona the fake holds %d sandboxes, want 1", n)
	}
	trips("sandbox create, inspect")
	if out, errOut, code := run("sandbox", "exec", id, "--", "sh", "-c", "echo one; echo two >&2; id -un; pwd; exit 3"); out != "one\ndaytona\n/workspace\n" || errOut != "two\n" || code != 3 {
		t.Errorf("exec: stdout %q, stderr %q, exit %d; want one, the user daytona, /workspace, two, exit 3", out, errOut, code)
	}
	trips("sandbox exec")
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "sub", "a.txt"), []byte("from the host\n"), 0o644)
	os.WriteFile(filepath.Join(tree, "run.sh"), []byte("#!/bin/sh\necho ran\n"), 0o755)
	os.Symlink("sub/a.txt", filepath.Join(tree, "link"))
	ok("sandbox", "cp", tree, id+":proj")
	trips("sandbox cp in (a directory)")
	ok("sandbox", "exec", id, "--", "sh", "-c", "echo made in daytona > proj/made")
	trips("sandbox exec (a file written)")
	want := "from the host\nran\nmade in daytona\n"
	check := func(sb, step string) {
		t.Helper()
		if got := ok("sandbox", "exec", sb, "--", "sh", "-c", "cat proj/link; proj/run.sh; cat proj/made"); got != want {
			t.Errorf("%s: the workspace shows %q, want %q", step, got, want)
		}
	}
	check(id, "cp in")
	trips("sandbox exec (the workspace read)")
	back := t.TempDir()
	ok("sandbox", "cp", id+":proj", back)
	trips("sandbox cp out (a directory)")
	if b, err := os.ReadFile(filepath.Join(back, "proj", "made")); err != nil || string(b) != "made in daytona\n" {
		t.Errorf("cp out: %q, %v", b, err)
	}

	fork := strings.TrimSpace(ok("sandbox", "fork", id, "--provider", "linux"))
	t.Cleanup(func() { rm(fork) })
	trips("sandbox fork daytona to linux")
	if p := inspect(fork); p != "linux" {
		t.Fatalf("fork --provider linux: provider %q", p)
	}
	check(fork, "daytona to linux (fork)")
	check(id, "the fork's source, after the fork")
	trips("exec in the fork and in its source")

	ok("sandbox", "switch", id, "--provider", "e2b")
	trips("sandbox switch daytona to e2b")
	if p := inspect(id); p != "e2b" {
		t.Fatalf("after switch --provider e2b: provider %q", p)
	}
	testkit.Eventually(t, "the daytona sandbox deleted after the switch", time.Minute, func() bool { return len(fake.Sandboxes()) == 0 })
	check(id, "daytona to e2b (switch)")
	ok("sandbox", "exec", id, "--", "sh", "-c", "echo made on e2b > proj/e2b")
	ok("sandbox", "switch", id, "--provider", "daytona")
	trips("sandbox switch e2b to daytona")
	if p := inspect(id); p != "daytona" {
		t.Fatalf("after switch --provider daytona: provider %q", p)
	}
	check(id, "e2b to daytona (switch)")
	if got := ok("sandbox", "exec", id, "--", "sh", "-c", "cat proj/e2b; id -un"); got != "made on e2b\ndaytona\n" {
		t.Errorf("back on daytona: %q", got)
	}
	trips("exec back on daytona")
	if out := ok("sandbox", "rm", id, fork); len(lines(out)) != 2 {
		t.Errorf("rm printed %q, want the two ids", out)
	}
	trips("sandbox rm")
	testkit.Eventually(t, "the daytona sandbox deleted", time.Minute, func() bool { return len(fake.Sandboxes()) == 0 })

	// The key is berth dev's alone: in no command's output, in none of
	// berth dev's log, in no workflow's history.
	if strings.Contains(printed.String(), daytonaKey) {
		t.Error("a berth command printed the Daytona API key")
	}
	if strings.Contains(devLog.String(), daytonaKey) {
		t.Error("berth dev's log holds the Daytona API key")
	}
	inNoHistory(t, addr, id, map[string]string{"the Daytona API key": daytonaKey})
}

// inNoHistory fails the test if any workflow run's history on the
// server at addr holds one of secrets (by what each is). It waits until
// the workflow id is listed, so that the run that used the secrets is
// among those read.
func inNoHistory(t *testing.T, addr, id string, secrets map[string]string) {
	t.Helper()
	c := dial1(t, addr)
	var all []*workflowpb.WorkflowExecutionInfo
	testkit.Eventually(t, "the sandbox's workflow listed", 30*time.Second, func() bool {
		all = all[:0]
		var next []byte
		for {
			resp, err := c.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{NextPageToken: next})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, resp.GetExecutions()...)
			if next = resp.GetNextPageToken(); len(next) == 0 {
				break
			}
		}
		return slices.ContainsFunc(all, func(e *workflowpb.WorkflowExecutionInfo) bool { return e.GetExecution().GetWorkflowId() == id })
	})
	for _, e := range all {
		var hist bytes.Buffer
		it := c.GetWorkflowHistory(t.Context(), e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			b, err := proto.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			hist.Write(b)
		}
		for what, secret := range secrets {
			if bytes.Contains(hist.Bytes(), []byte(secret)) {
				t.Errorf("the history of %s %s holds %s", e.GetType().GetName(), e.GetExecution().GetWorkflowId(), what)
			}
		}
	}
	t.Logf("the secrets are in none of %d workflow runs' histories", len(all))
}
