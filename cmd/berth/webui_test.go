package main

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/workflows"
)

// TestWebUIReadable: after berth dev has run two runs, two sandboxes,
// berth providers twice and berth snapshot ls twice, the server's list
// of workflows (what the Web UI shows) holds those runs and sandboxes,
// one catalog, one reaper and the session manager, and nothing else;
// each with a summary a person can read, that says what it is.
func TestWebUIReadable(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := runBerth(t, berth, append(args[:1:1], append([]string{"--address", addr}, args[1:]...)...)...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	sub := func(cmd string, args ...string) string {
		t.Helper()
		out, errOut, code := runBerth(t, berth, append([]string{cmd, args[0], "--address", addr}, args[1:]...)...)
		if code != 0 {
			t.Fatalf("berth %s %s: exit %d\n%s%s", cmd, strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	want := map[string]string{} // workflow id -> what its summary must say
	for i := range 2 {
		id := strings.TrimSpace(ok("run", "--detach", "--", "sh", "-c", fmt.Sprintf("echo run %d\n\x1b[2Jexit 0", i)))
		want[id] = fmt.Sprintf("run on linux: sh -c 'echo run %d⏎␛[2Jexit 0'", i)
		sbx := strings.TrimSpace(sub("sandbox", "create", "--env", "SECRET=hunter2"))
		want[sbx] = "sandbox on linux"
		ok("providers")
		sub("snapshot", "ls")
	}
	want[workflows.CatalogID("")] = workflows.CatalogSummary("berth")
	want[session.DefaultManagerID] = session.ManagerSummary

	c, err := client.Dial(client.Options{HostPort: addr, Logger: log.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]int{}
	for _, e := range resp.Executions {
		id, name := e.GetExecution().GetWorkflowId(), e.GetType().GetName()
		types[name]++
		desc, err := c.DescribeWorkflow(t.Context(), id, e.GetExecution().GetRunId())
		if err != nil {
			t.Fatal(err)
		}
		summary, err := desc.GetStaticSummary()
		if err != nil {
			t.Fatal(err)
		}
		if summary == "" || len(summary) > workflows.MaxSummary || strings.ContainsFunc(summary, unicode.IsControl) {
			t.Errorf("%s (%s): summary %q: want one readable line of at most %d bytes", id, name, summary, workflows.MaxSummary)
		}
		if strings.Contains(summary, "hunter2") {
			t.Errorf("%s: summary %q shows an environment value", id, summary)
		}
		w, known := want[id]
		switch {
		case name == workflows.ReaperWorkflowName && strings.HasPrefix(summary, "reaper of host berth, every 5m0s"):
		case !known:
			t.Errorf("workflow %s (%s, %q) was not expected", id, name, summary)
		case summary != w:
			t.Errorf("%s (%s): summary %q, want %q", id, name, summary, w)
		}
	}
	wantTypes := map[string]int{workflows.RunWorkflowName: 2, workflows.SandboxWorkflowName: 2, workflows.CatalogWorkflowName: 1,
		workflows.ReaperWorkflowName: 1, session.WorkflowName: 1}
	if fmt.Sprint(types) != fmt.Sprint(wantTypes) {
		t.Errorf("workflows by type: %v, want %v", types, wantTypes)
	}
}
