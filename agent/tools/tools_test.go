package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/agent/chat"
)

func call(t testing.TB, name string, args map[string]any) chat.ToolCall {
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return chat.ToolCall{ID: "c", Name: name, Arguments: string(b)}
}

func write(t testing.TB, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTools(t *testing.T) {
	dir := t.TempDir()
	ws := Dir(dir)
	var long strings.Builder
	for i := 1; i <= 3000; i++ {
		long.WriteString("a line of some length, number ")
		long.WriteString(strings.Repeat("x", i%7))
		long.WriteString("\n")
	}
	write(t, dir, "big.txt", long.String())
	write(t, dir, "dup.go", "x := 1\nx := 1\n")
	write(t, dir, "src/main.go", "package main\n\nfunc main() {}\n")
	tests := []struct {
		name   string
		call   chat.ToolCall
		failed bool
		says   []string
	}{
		{"shell", call(t, Shell, map[string]any{"command": "echo out; echo err >&2; exit 3"}), false, []string{"exit code 3", "out\n", "stderr:\nerr"}},
		{"shell timeout", call(t, Shell, map[string]any{"command": "sleep 5", "timeout_seconds": 1}), false, []string{"timed out after 1s"}},
		{"shell output capped", call(t, Shell, map[string]any{"command": "seq 1 100000"}), false, []string{"bytes cut here", "out.txt", "\n100000\n"}},
		{"read a range", call(t, ReadFile, map[string]any{"path": "src/main.go", "start_line": 3, "end_line": 3}), false, []string{"3\tfunc main() {}"}},
		{"read capped", call(t, ReadFile, map[string]any{"path": "big.txt"}), false, []string{"1\ta line", "of 3000", "call read_file with start_line"}},
		{"read missing", call(t, ReadFile, map[string]any{"path": "nope.txt"}), true, []string{"does not exist"}},
		{"read outside", call(t, ReadFile, map[string]any{"path": "../etc/passwd"}), true, []string{"bad path"}},
		{"write", call(t, WriteFile, map[string]any{"path": "new/dir/f.txt", "content": "hello\n"}), false, []string{"wrote 6 bytes"}},
		{"edit", call(t, EditFile, map[string]any{"path": "src/main.go", "old_string": "func main() {}", "new_string": "func main() { println(1) }"}), false, []string{"edited src/main.go at line 3"}},
		{"edit absent", call(t, EditFile, map[string]any{"path": "src/main.go", "old_string": "nothing like it", "new_string": "x"}), true, []string{"not in src/main.go"}},
		{"edit not unique", call(t, EditFile, map[string]any{"path": "dup.go", "old_string": "x := 1", "new_string": "y"}), true, []string{"2 times", "lines 1, 2"}},
		{"list", call(t, ListFiles, map[string]any{"depth": 2}), false, []string{"src/\n  main.go (", "big.txt ("}},
		{"unknown tool", chat.ToolCall{Name: "browse", Arguments: "{}"}, true, []string{"no tool \"browse\""}},
		{"bad arguments", chat.ToolCall{Name: Shell, Arguments: "{\"command\": "}, true, []string{"not a JSON object"}},
		{"tty not a boolean", call(t, Shell, map[string]any{"command": "echo ran", "tty": "yes"}), true, []string{"not a JSON object", "tty"}},
		{"tty in a directory", call(t, Shell, map[string]any{"command": "echo ran", "tty": true}), true, []string{"runs no command on a terminal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Run(ws, tt.call)
			if res.Failed != tt.failed {
				t.Errorf("failed %v, want %v: %s", res.Failed, tt.failed, res.Output)
			}
			for _, s := range tt.says {
				if !strings.Contains(res.Output, s) {
					t.Errorf("output does not say %q:\n%s", s, res.Output)
				}
			}
			if len(res.Output) > MaxOutput {
				t.Errorf("output of %d bytes, more than %d", len(res.Output), MaxOutput)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "dup.go")); string(b) != "x := 1\nx := 1\n" {
		t.Errorf("a refused edit changed the file: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new/dir/f.txt")); string(b) != "hello\n" {
		t.Errorf("written file: %q", b)
	}
}

// Rewriting an executable keeps it executable.
func TestEditKeepsMode(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("echo a\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if res := Run(Dir(dir), call(t, EditFile, map[string]any{"path": "run.sh", "old_string": "a", "new_string": "b"})); res.Failed {
		t.Fatal(res.Output)
	}
	if fi, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode after the edit: %v %v", fi.Mode(), err)
	}
}

func TestInstructions(t *testing.T) {
	dir := t.TempDir()
	if got := Instructions(Dir(dir), "You are a coding agent."); got != "You are a coding agent." {
		t.Errorf("without AGENTS.md: %q", got)
	}
	write(t, dir, "AGENTS.md", "Run go test before you say you are done.\n")
	got := Instructions(Dir(dir), "You are a coding agent.")
	if !strings.HasPrefix(got, "You are a coding agent.") || !strings.Contains(got, "Run go test before you say you are done.") {
		t.Errorf("with AGENTS.md: %q", got)
	}
}

func TestDefinitions(t *testing.T) {
	defs := Definitions()
	names := map[string]bool{}
	for _, d := range defs {
		names[d.Name] = true
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(d.Parameters, &schema); err != nil || schema.Type != "object" {
			t.Errorf("%s: schema %s: %v", d.Name, d.Parameters, err)
		}
		for _, r := range schema.Required {
			if _, ok := schema.Properties[r]; !ok {
				t.Errorf("%s: required %q is not a property", d.Name, r)
			}
		}
	}
	for _, n := range []string{Shell, ReadFile, WriteFile, EditFile, ApplyPatch, ListFiles} {
		if !names[n] {
			t.Errorf("no definition of %s", n)
		}
	}
}

// shell's tty exists from VersionShellTTY on: offered, checked and run
// then; before, not offered, and ignored as it was, whatever its value.
func TestShellTTYVersions(t *testing.T) {
	props := func(v Version) map[string]json.RawMessage {
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		for _, d := range DefinitionsAt(v) {
			if d.Name == Shell {
				if err := json.Unmarshal(d.Parameters, &schema); err != nil {
					t.Fatal(err)
				}
			}
		}
		return schema.Properties
	}
	if p := props(Latest)["tty"]; !strings.Contains(string(p), `"boolean"`) {
		t.Errorf("shell's tty at Latest: %s", p)
	}
	if p, ok := props(VersionBase)["tty"]; ok {
		t.Errorf("shell offers tty at VersionBase: %s", p)
	}
	ws := Dir(t.TempDir())
	for _, tty := range []any{true, "yes"} {
		res := RunAt(VersionBase, ws, call(t, Shell, map[string]any{"command": "test -t 1 || echo plain", "tty": tty}))
		if res.Failed || !strings.Contains(res.Output, "exit code 0\nplain") {
			t.Errorf("tty %v at VersionBase: %s", tty, res.Output)
		}
	}
}
