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
