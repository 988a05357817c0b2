package sandboxtest_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

// toolsWorkflow runs tool calls, one after the other, in a new linux
// sandbox, and returns their results and the instructions it read.
func toolsWorkflow(ctx workflow.Context, calls []chat.ToolCall) ([]string, error) {
	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
	if err != nil {
		return nil, err
	}
	defer sbx.Stop(ctx)
	ws := tools.OnSandbox(ctx, sbx)
	var out []string
	for _, c := range calls {
		res := tools.Run(ws, c)
		if res.Failed {
			out = append(out, "FAILED "+res.Output)
		} else {
			out = append(out, res.Output)
		}
	}
	return append(out, tools.Instructions(ws, "base")), nil
}

func toolCall(t *testing.T, name string, args map[string]any) chat.ToolCall {
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return chat.ToolCall{ID: name, Name: name, Arguments: string(b)}
}

// The tools, in a real sandbox of the linux provider, driven by a
// workflow on the embedded server through the sandbox handle.
func TestToolsInSandbox(t *testing.T) {
	c := testserver.Client(t)
	p := berthtest.Provider(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: berthtest.Bucket(t),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, Workflows: []any{toolsWorkflow},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	// python3 -B: a .pyc of the first run, as old as the patched file to
	// the second and of the same size, would hide the patch.
	patch := "--- calc.py\n+++ calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
	calls := []chat.ToolCall{
		toolCall(t, tools.WriteFile, map[string]any{"path": "AGENTS.md", "content": "Always run the tests.\n"}),
		toolCall(t, tools.WriteFile, map[string]any{"path": "calc.py", "content": "def add(a, b):\n    return a - b\n"}),
		toolCall(t, tools.WriteFile, map[string]any{"path": "test_calc.py", "content": "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"}),
		toolCall(t, tools.Shell, map[string]any{"command": "python3 -B test_calc.py"}),
		toolCall(t, tools.ApplyPatch, map[string]any{"patch": patch}),
		toolCall(t, tools.Shell, map[string]any{"command": "python3 -B test_calc.py"}),
		toolCall(t, tools.EditFile, map[string]any{"path": "calc.py", "old_string": "a + b", "new_string": "b + a"}),
		toolCall(t, tools.ReadFile, map[string]any{"path": "calc.py", "start_line": 2}),
		toolCall(t, tools.ReadFile, map[string]any{"path": "missing.py"}),
		toolCall(t, tools.ListFiles, map[string]any{}),
	}
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, toolsWorkflow, calls)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	want := []string{"wrote 22 bytes to AGENTS.md", "wrote", "wrote", "exit code 1", "applied:\nM calc.py", "exit code 0\nok",
		"edited calc.py at line 2", "2\t    return b + a", "FAILED error: missing.py does not exist", "calc.py (", "Always run the tests."}
	if len(out) != len(want) {
		t.Fatalf("%d results, want %d: %q", len(out), len(want), out)
	}
	for i, w := range want {
		if !strings.Contains(out[i], w) {
			t.Errorf("result %d: %q, want it to say %q", i, out[i], w)
		}
	}
	if !strings.Contains(out[3], "AssertionError") {
		t.Errorf("the failing test's output: %q", out[3])
	}
}

// shell with tty runs its command on a terminal of the sandbox, its
// stdin, stdout and stderr, of the documented size; without tty, or
// tty false, on none. A terminal command's timeout and output cap are a
// plain one's, and it gets no input: cat waits for its timeout.
func TestTTYInSandbox(t *testing.T) {
	c := testserver.Client(t)
	p := berthtest.Provider(t)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: berthtest.Bucket(t),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, Workflows: []any{toolsWorkflow},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	const probe = "if test -t 0 && test -t 1 && test -t 2; then echo tty; else echo notty; fi; " +
		"/usr/bin/python3 -c 'import os; print(os.isatty(1), os.get_terminal_size(1) if os.isatty(1) else \"\")'; " +
		"echo err >&2; echo TERM=$TERM"
	shell := func(args map[string]any) chat.ToolCall { return toolCall(t, tools.Shell, args) }
	calls := []chat.ToolCall{
		shell(map[string]any{"command": probe, "tty": true}),
		shell(map[string]any{"command": probe, "tty": false}),
		shell(map[string]any{"command": probe}),
		shell(map[string]any{"command": "ls --color=auto /", "tty": true}),
		shell(map[string]any{"command": "cat", "tty": true, "timeout_seconds": 1}),
		shell(map[string]any{"command": "seq 1 100000", "tty": true}),
	}
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, toolsWorkflow, calls)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := run.Get(t.Context(), &out); err != nil {
		t.Fatal(err)
	}
	if len(out) != len(calls)+1 {
		t.Fatalf("%d results, want %d: %q", len(out), len(calls)+1, out)
	}
	// One stream on a terminal: stderr's line is in it, in order.
	if want := "exit code 0\ntty\r\nTrue os.terminal_size(columns=120, lines=40)\r\nerr\r\nTERM=xterm-256color\r\n"; out[0] != want {
		t.Errorf("on a terminal: %q, want %q", out[0], want)
	}
	for i := 1; i <= 2; i++ {
		if want := "exit code 0\nnotty\nFalse \nTERM=\nstderr:\nerr\n"; out[i] != want {
			t.Errorf("call %d, on no terminal: %q, want %q", i, out[i], want)
		}
	}
	if !strings.Contains(out[3], "\x1b[") || !strings.Contains(out[3], "usr") {
		t.Errorf("ls --color=auto on a terminal shows no colors: %q", out[3])
	}
	if !strings.Contains(out[4], "timed out after 1s") {
		t.Errorf("cat on a terminal: %q, want it timed out", out[4])
	}
	if !strings.Contains(out[5], "bytes cut here") || !strings.Contains(out[5], "\n100000\r\n") || len(out[5]) > tools.MaxOutput {
		t.Errorf("seq on a terminal, %d bytes: %q...", len(out[5]), out[5][:min(len(out[5]), 200)])
	}
}
