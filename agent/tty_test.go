package agent_test

import (
	"encoding/json"
	"testing"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/internal/fakemodel"
)

// A shell call with tty runs on a terminal of the session's sandbox,
// and its output is the tool message of the model's next request, whose
// shell offers tty.
func TestShellTTY(t *testing.T) {
	h := newHarness(t)
	h.Model.Script(
		toolCalls(call("t1", tools.Shell, map[string]any{"command": "test -t 1 && echo on-a-tty || echo no-tty", "tty": true}),
			call("t2", tools.Shell, map[string]any{"command": "test -t 1 && echo on-a-tty || echo no-tty"})),
		fakemodel.Reply{Text: "done"},
	)
	s := h.start(agent.SessionInput{})
	if st := s.turn(s.send("is it a terminal?")); st.Status != agent.StatusDone {
		t.Fatalf("turn: %+v", st)
	}
	reqs := h.Model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	for _, tool := range reqs[0].Tools {
		var schema struct {
			Properties map[string]struct {
				Type string `json:"type"`
			} `json:"properties"`
		}
		if tool.Function.Name == tools.Shell {
			if err := json.Unmarshal(tool.Function.Parameters, &schema); err != nil || schema.Properties["tty"].Type != "boolean" {
				t.Errorf("shell's parameters offered: %s (%v)", tool.Function.Parameters, err)
			}
		}
	}
	msgs := reqs[1].Messages
	if len(msgs) < 2 {
		t.Fatalf("the second call's conversation: %+v", msgs)
	}
	tty, plain := msgs[len(msgs)-2], msgs[len(msgs)-1]
	if tty.Role != "tool" || tty.Text() != "exit code 0\non-a-tty\r\n" {
		t.Errorf("the tty call's tool message: %s %q", tty.Role, tty.Text())
	}
	if plain.Role != "tool" || plain.Text() != "exit code 0\nno-tty\n" {
		t.Errorf("the plain call's tool message: %s %q", plain.Role, plain.Text())
	}
}
