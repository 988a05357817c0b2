package agent_test

import (
	"testing"

	"go.temporal.io/sdk/worker"

	"github.com/berth-dev/berth/agent"
)

// Histories recorded by earlier versions of the Session workflow replay
// on this one. paused-woken-v0.json, made at b00b70f (before a session
// told its manager of a wake): a session of a manager, a turn, paused,
// woken by a message, paused and resumed. shell-tty-v0.json, made at
// ef95a07 (before shell's tty): a turn whose model asks for a shell call
// with tty anyway, which ran on no terminal (as a local activity first),
// then the end.
func TestReplayOldHistories(t *testing.T) {
	for _, file := range []string{"testdata/paused-woken-v0.json", "testdata/shell-tty-v0.json"} {
		r := worker.NewWorkflowReplayer()
		agent.Register(r)
		if err := r.ReplayWorkflowHistoryFromJSONFile(nil, file); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}
