package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/testkit"
)

// TestCheckpointFlags: berth sandbox create and berth session new take
// the same checkpoint flags, and refuse a bad policy in one line of
// BadInput before they dial: the address given answers nothing.
func TestCheckpointFlags(t *testing.T) {
	berth := berthBinary(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t))
	for _, cmd := range [][]string{{"sandbox", "create"}, {"session", "new"}} {
		for _, flags := range [][]string{
			{"--checkpoint-every", "-1"},
			{"--checkpoint-interval", "10ms"},
			{"--checkpoint-idle", "-1s"},
			{"--checkpoint-every", "2", "--checkpoint-idle", "500ms"},
		} {
			args := append(append(append([]string{}, cmd...), flags...), "--address", addr)
			out, errOut, code := runBerth(t, berth, args...)
			line := strings.TrimSpace(errOut)
			if code == 0 || out != "" || strings.Count(line, "\n") != 0 || !strings.HasPrefix(line, "berth: BadInput: ") || !strings.Contains(line, "checkpoint") {
				t.Errorf("berth %s: exit %d, stdout %q, stderr %q; want one line of BadInput about the checkpoint, before dialling", strings.Join(args, " "), code, out, errOut)
			}
		}
	}
}
