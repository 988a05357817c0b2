package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun runs `berth-sandboxd run` in the installed binary twice with one
// key: the subcommand is reached before the providers' init modes, and
// its supervisor, the binary re-executed, runs the command once.
func TestRun(t *testing.T) {
	bin, dir := build(t), t.TempDir()
	counter := filepath.Join(t.TempDir(), "counter")
	for _, which := range []string{"first", "retry"} {
		cmd := exec.CommandContext(t.Context(), bin, "run", "--dir", dir, "--key", "exec-1", "--",
			"sh", "-c", `echo x >> "$0"; echo out; exit 0`, counter)
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil || out.String() != "out\n" {
			t.Errorf("%s call: %v, %q; want exit 0 and %q", which, err, out.String(), "out\n")
		}
	}
	b, err := os.ReadFile(counter)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n != 1 {
		t.Errorf("the command ran %d times, want 1", n)
	}
}
