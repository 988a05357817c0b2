package tui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/session"
)

func s1() session.Info {
	return session.Info{ID: "s1", Title: "fix tests", Provider: "linux", Status: session.StatusActive}
}

// hasCall reports whether the fake was called so, in the end.
func hasCall(f *fake, call string) bool { return slices.Contains(f.called(), call) }

func TestListCreateOpen(t *testing.T) {
	f := newFake(s1())
	d := drive(t, f, Options{New: session.CreateRequest{Provider: "docker", Approvals: true}})
	d.shows("berth chat: sessions", "* s1  fix tests  linux  active")

	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("n")})
	d.shows("session s2 · s2 · docker · active", "> ")
	if !hasCall(f, "Create  docker true") {
		t.Errorf("calls %q: no Create with Options.New", f.called())
	}

	d.key(tea.KeyEsc)
	d.shows("* s1", "  s2")
	d.send(tea.KeyMsg{Type: tea.KeyDown})
	d.shows("* s2")
	d.key(tea.KeyEnter)
	d.shows("session s2 · s2")
}

// TestTurnLive follows a turn through its states, each a Wait's answer:
// thinking, a shell call running then with its output, another tool,
// the answer.
func TestTurnLive(t *testing.T) {
	f := newFake(s1())
	f.push("s1", agent.State{Status: agent.StatusIdle})
	d := drive(t, f, Options{Session: "fix tests"}) // by title
	d.shows("session s1 · fix tests · linux · idle")

	d.typ("make the tests pass")
	d.shows("you: make the tests pass")
	d.until("Send", func(string) bool { return hasCall(f, "Send s1 make the tests pass") })

	turn := agent.TurnState{Number: 1, Status: agent.StatusThinking, Message: "make the tests pass"}
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: turn})
	d.shows("thinking…", "· thinking")

	shell := agent.CallState{ID: "c1", Name: "shell", Arguments: `{"command":"go test ./..."}`, Status: agent.StatusRunning,
		Said: "Let me run the tests first."}
	turn.Status, turn.Tool, turn.Calls = agent.StatusRunning, "shell", []agent.CallState{shell}
	f.push("s1", agent.State{Status: agent.StatusRunning, Turn: turn})
	d.shows("Let me run the tests first.", "$ go test ./...", "running…", "· running shell")
	if v := d.view(); strings.Index(v, "Let me run the tests first.") > strings.Index(v, "$ go test") {
		t.Errorf("what the model said shows after its call:\n%s", v)
	}

	shell.Status, shell.Output, shell.Failed = agent.StatusDone, "--- FAIL: TestAdd\nexit status 1", true
	read := agent.CallState{ID: "c2", Name: "read_file", Arguments: `{"path":"add.go"}`, Status: agent.StatusDone, Output: "1\tpackage add"}
	turn.Status, turn.Tool, turn.Calls = agent.StatusThinking, "", []agent.CallState{shell, read}
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: turn})
	d.shows("  --- FAIL: TestAdd", "  exit status 1", "[tool] read_file {\"path\":\"add.go\"}", "  1    package add", "· thinking")

	turn.Status, turn.Answer = agent.StatusDone, "Fixed Add; the tests pass."
	done := turn
	done.Calls = nil
	f.push("s1", agent.State{Status: agent.StatusIdle, Turn: turn, Turns: []agent.TurnState{done}})
	d.shows("Fixed Add; the tests pass.", "· idle")
	v := d.view()
	if strings.Contains(v, "thinking…") || strings.Contains(v, "(sending)") {
		t.Errorf("a finished turn still shows as under way:\n%s", v)
	}
	if n := strings.Count(v, "you: make the tests pass"); n != 1 {
		t.Errorf("the message shows %d times, want once:\n%s", n, v)
	}
	// the tool calls come before the answer, in order
	if i, j, k := strings.Index(v, "$ go test"), strings.Index(v, "[tool] read_file"), strings.Index(v, "Fixed Add"); !(i < j && j < k) {
		t.Errorf("calls and answer out of order (%d, %d, %d):\n%s", i, j, k, v)
	}
}

// TestReopen rebuilds the view from the state alone: past turns, the
// last with its calls, a failed one.
func TestReopen(t *testing.T) {
	f := newFake(s1())
	last := agent.TurnState{Number: 3, Status: agent.StatusDone, Message: "third", Answer: "answer three",
		Calls: []agent.CallState{{ID: "c9", Name: "shell", Arguments: `{"command":"ls"}`, Status: agent.StatusDone, Output: "a.go"}}}
	kept := last
	kept.Calls = nil
	f.push("s1", agent.State{Status: agent.StatusIdle, Turn: last, Turns: []agent.TurnState{
		{Number: 1, Status: agent.StatusDone, Message: "first", Answer: "answer one"},
		{Number: 2, Status: agent.StatusFailed, Message: "second", Error: "StepLimit: the turn stopped after 30 model calls"},
		kept,
	}})
	d := drive(t, f, Options{Session: "s1"})
	d.shows("you: first", "answer one", "you: second", "failed: StepLimit: the turn stopped", "you: third", "$ ls", "  a.go", "answer three")

	d.key(tea.KeyCtrlC)
	d.settle()
	if !d.quit {
		t.Error("ctrl+c did not quit")
	}
	if d.m.waitCtx.Err() == nil {
		t.Error("the Wait in flight goes on after quitting")
	}
	for _, c := range f.called() {
		if strings.HasPrefix(c, "Destroy") {
			t.Errorf("quitting called %s: the session must go on", c)
		}
	}
}

func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		call       string   // the Backend call it makes
		shows      []string // what the view shows then
	}{
		{"fork", "/fork try b", "Fork s1 try b ", []string{"session s2 · try b · linux", "forked s1 as s2"}},
		{"fork untitled", "/fork", "Fork s1  ", []string{"session s2 · s2 · linux"}},
		{"switch", "/switch docker", "Switch s1 docker ", []string{"session s1 · fix tests · docker", "s1 is on docker"}},
		{"switch image", "/switch docker python:3.12-slim", "Switch s1 docker python:3.12-slim", []string{"session s1 · fix tests · docker", "s1 is on docker"}},
		{"title", "/title the parser bug", "Rename s1 the parser bug", []string{"session s1 · the parser bug · linux"}},
		{"done keep", "/done keep", "Destroy s1 true", []string{"berth chat: sessions", "kept as snapshot snap-s1"}},
		{"done destroy", "/done destroy", "Destroy s1 false", []string{"berth chat: sessions", "destroyed s1", "no sessions yet"}},
		{"sessions", "/sessions", "List", []string{"berth chat: sessions", "* s1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(s1())
			f.push("s1", agent.State{Status: agent.StatusIdle})
			d := drive(t, f, Options{Session: "s1"})
			d.shows("session s1")
			before := len(f.called())
			d.typ(tc.line)
			d.until(tc.call, func(string) bool { return slices.Contains(f.called()[before:], tc.call) })
			d.shows(tc.shows...)
			if strings.Contains(d.view(), "error:") {
				t.Errorf("an error:\n%s", d.view())
			}
		})
	}
}

// TestCommandsLocal: commands that call nothing, or refuse.
func TestCommandsLocal(t *testing.T) {
	f := newFake(s1())
	f.push("s1", agent.State{Status: agent.StatusIdle})
	d := drive(t, f, Options{Session: "s1"})
	d.shows("session s1")
	before := len(f.called())

	d.typ("/help")
	d.shows("/fork [title]", "/approve, /deny", "/done keep", "/done destroy")
	d.typ("/done")
	d.shows("/done keep keeps the workspace as a snapshot; /done destroy deletes it")
	d.typ("/switch")
	d.shows("error: /switch needs a provider")
	d.typ("/switch docker an-image one-too-many")
	d.shows("error: /switch needs a provider, and may name an image")
	d.typ("/title")
	d.shows("error: /title needs a name")
	d.typ("/approve")
	d.shows("error: no tool call awaits approval")
	d.typ("/frobnicate")
	d.shows("error: unknown command /frobnicate: /help lists them")
	d.settle()
	if c := f.called()[before:]; len(c) != 0 {
		t.Errorf("local commands called the backend: %q", c)
	}
	d.typ("/quit")
	d.settle()
	if !d.quit {
		t.Error("/quit did not quit")
	}
}

// TestApprove: /approve and /deny target the call awaiting approval,
// not the others of the turn.
func TestApprove(t *testing.T) {
	f := newFake(s1())
	turn := agent.TurnState{Number: 1, Status: agent.StatusApproval, Message: "clean up", Tool: "shell", Calls: []agent.CallState{
		{ID: "c1", Name: "shell", Arguments: `{"command":"ls"}`, Status: agent.StatusDone, Output: "junk"},
		{ID: "c2", Name: "shell", Arguments: `{"command":"rm -rf junk"}`, Status: agent.StatusApproval},
	}}
	f.push("s1", agent.State{Status: agent.StatusApproval, Turn: turn})
	d := drive(t, f, Options{Session: "s1"})
	d.shows("$ rm -rf junk", "awaiting approval: /approve or /deny", "· awaiting_approval")

	d.typ("/approve")
	d.until("Approve", func(string) bool { return hasCall(f, "Approve s1 c2 true") })
	d.typ("/deny")
	d.until("deny", func(string) bool { return hasCall(f, "Approve s1 c2 false") })

	turn.Calls[1].Status = agent.StatusDenied
	turn.Status = agent.StatusThinking
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: turn})
	d.shows("  denied", "· thinking")
	d.typ("/approve")
	d.shows("error: no tool call awaits approval")
}

// TestApproveHiddenCommand: a command awaiting approval shows whole,
// however it tries to hide part of itself: below a screenful of blank
// lines, behind a carriage return and an erase-line sequence, or behind
// a bidirectional override.
func TestApproveHiddenCommand(t *testing.T) {
	f := newFake(s1())
	command := "id > PWNED" + strings.Repeat("\n", 60) + "echo x #\r\x1b[2Kls -la \u202e"
	args, err := json.Marshal(map[string]string{"command": command})
	if err != nil {
		t.Fatal(err)
	}
	turn := agent.TurnState{Number: 1, Status: agent.StatusApproval, Message: "look", Tool: "shell", Calls: []agent.CallState{
		{ID: "c1", Name: "shell", Arguments: string(args), Status: agent.StatusApproval},
	}}
	f.push("s1", agent.State{Status: agent.StatusApproval, Turn: turn})
	d := drive(t, f, Options{Session: "s1"})
	d.send(tea.WindowSizeMsg{Width: 80, Height: 12})
	d.shows("$ id > PWNED", "⟨59 blank lines⟩", "echo x #␍␛[2Kls -la ⟨U+202E⟩", "awaiting approval: /approve or /deny")
	if raw := d.m.View(); strings.Contains(raw, "\x1b[2K") || strings.Contains(raw, "\u202e") {
		t.Errorf("the command's control sequences reach the terminal: %q", raw)
	}
}

// TestErrors: every failure is one line in the status line, and the UI
// goes on.
func TestErrors(t *testing.T) {
	f := newFake(s1())
	f.fail("List", errBoom)
	d := drive(t, f, Options{})
	d.shows("berth chat: sessions", "error: unavailable: the server is gone")
	f.fail("List", nil)
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	d.shows("* s1")
	if strings.Contains(d.view(), "error:") {
		t.Errorf("the error stays after a good list:\n%s", d.view())
	}

	f.fail("Create", errBoom)
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("n")})
	d.shows("error: unavailable")

	f.push("s1", agent.State{Status: agent.StatusIdle})
	d.key(tea.KeyEnter)
	d.shows("session s1 · fix tests · linux · idle")

	// Each failure shows, and the view stays on s1.
	for _, tc := range []struct{ method, line, call string }{
		{"Send", "hello", "Send s1 hello"},
		{"Fork", "/fork b", "Fork s1 b "},
		{"Rename", "/title x", "Rename s1 x"},
		{"Switch", "/switch docker", "Switch s1 docker "},
		{"Destroy", "/done destroy", "Destroy s1 false"},
	} {
		f.fail(tc.method, errBoom)
		before := len(f.called())
		d.send(tea.KeyMsg{Type: tea.KeyCtrlU}) // clears the input
		d.typ(tc.line)
		if strings.Contains(d.view(), "error:") {
			t.Fatalf("%s: the last error stays as the next command starts:\n%s", tc.method, d.view())
		}
		d.until(tc.call, func(string) bool { return slices.Contains(f.called()[before:], tc.call) })
		d.shows("error: unavailable: the server is gone", "session s1 · fix tests · linux · idle")
		f.fail(tc.method, nil)
		if tc.method == "Send" {
			d.shows("> hello") // the message that was not sent is back in the input
			if strings.Contains(d.view(), "you: hello") {
				t.Errorf("a message that was not sent shows as sent:\n%s", d.view())
			}
		}
	}

	// A Wait that fails shows its error and is tried again.
	f.fail("Wait", errBoom)
	d.key(tea.KeyEsc)
	d.shows("berth chat: sessions")
	d.key(tea.KeyEnter)
	d.shows("error: unavailable")
	f.fail("Wait", nil)
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: agent.TurnState{Number: 1, Status: agent.StatusThinking, Message: "m"}})
	d.shows("· thinking")
	if strings.Contains(d.view(), "error:") {
		t.Errorf("the Wait's error stays after it works again:\n%s", d.view())
	}
}

// TestSafeAndWrapped: a tool's output cannot write escape sequences to
// the terminal, and long lines wrap to its width.
func TestSafeAndWrapped(t *testing.T) {
	f := newFake(s1())
	long := strings.Repeat("word ", 40)
	f.push("s1", agent.State{Status: agent.StatusIdle, Turn: agent.TurnState{Number: 1, Status: agent.StatusDone, Message: "go",
		Answer: long + "end",
		Calls: []agent.CallState{{ID: "c1", Name: "shell", Arguments: `{"command":"cat x"}`, Status: agent.StatusDone,
			Output: "before\x1b]0;owned\x07\x1b[2Jafter\r\n" + strings.Repeat("x", 100)}}}})
	d := drive(t, f, Options{Session: "s1"})
	d.send(tea.WindowSizeMsg{Width: 40, Height: 40})
	d.shows("end")
	raw := d.m.View()
	if strings.Contains(raw, "owned") && strings.Contains(raw, "\x1b]0;") || strings.Contains(raw, "\x1b[2J") || strings.Contains(raw, "\x07") {
		t.Errorf("the output's escape sequences reach the terminal: %q", raw)
	}
	for _, l := range strings.Split(d.view(), "\n") {
		if w := ansi.StringWidth(l); w > 40 {
			t.Errorf("a line of %d cells, wider than the terminal's 40: %q", w, l)
		}
	}
	if !strings.Contains(d.view(), "  "+strings.Repeat("x", 38)) {
		t.Errorf("the long output line is not wrapped, indented:\n%s", d.view())
	}
}

// TestLongErrorWraps: an error longer than the terminal is wide wraps
// to its width, whole, in the chat and in the list, and the
// conversation keeps its last lines in view above it.
func TestLongErrorWraps(t *testing.T) {
	f := newFake(s1())
	f.push("s1", agent.State{Status: agent.StatusIdle, Turn: agent.TurnState{Number: 1, Status: agent.StatusDone, Message: "go", Answer: "the last answer"}})
	d := drive(t, f, Options{Session: "s1"})
	d.send(tea.WindowSizeMsg{Width: 40, Height: 20})
	d.shows("the last answer")
	long := "create sandbox sbx-1: the default image berth-host:1-v0.1.0 could not be made from the host's files: too big: it would hold more than 512 MiB (at /usr/lib/x86_64-linux-gnu/libLLVM.so.15) END"
	f.fail("Switch", errors.New(long))
	d.typ("/switch docker")
	d.shows("END")
	view := d.view()
	lines := strings.Split(view, "\n")
	if len(lines) > 20 {
		t.Errorf("the view has %d lines, more than the terminal's 20:\n%s", len(lines), view)
	}
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 40 {
			t.Errorf("a line of %d cells, wider than the terminal's 40: %q", w, l)
		}
	}
	squeeze := func(s string) string { return strings.Join(strings.Fields(s), "") }
	if !strings.Contains(squeeze(view), squeeze(long)) {
		t.Errorf("the error is not shown whole:\n%s", view)
	}
	if !strings.Contains(view, "the last answer") {
		t.Errorf("the conversation's last lines are hidden by the error:\n%s", view)
	}
	d.key(tea.KeyEsc)
	d.shows("berth chat: sessions")
	f.fail("List", errors.New(long))
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("r")})
	d.shows("END", "* s1")
	for _, l := range strings.Split(d.view(), "\n") {
		if w := ansi.StringWidth(l); w > 40 {
			t.Errorf("in the list, a line of %d cells, wider than the terminal's 40: %q", w, l)
		}
	}
}

// TestStaleSession: the states of a session no longer shown are dropped.
func TestStaleSession(t *testing.T) {
	f := newFake(s1(), session.Info{ID: "s2", Title: "other", Provider: "linux", Status: session.StatusActive})
	f.push("s1", agent.State{Status: agent.StatusIdle})
	d := drive(t, f, Options{Session: "s1"})
	d.shows("session s1")
	d.key(tea.KeyEsc)
	d.shows("berth chat: sessions")
	d.send(tea.KeyMsg{Type: tea.KeyDown})
	d.key(tea.KeyEnter)
	d.shows("session s2 · other")
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: agent.TurnState{Number: 1, Status: agent.StatusThinking, Message: "for s1"}})
	d.settle()
	if v := d.view(); strings.Contains(v, "for s1") {
		t.Errorf("s1's state shows in s2's view:\n%s", v)
	}
}

// syncBuffer is the terminal's output, written by bubbletea's renderer
// and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRun runs the program on pipes: it draws the session, takes a
// message typed and quits on ctrl+c, the session left running.
func TestRun(t *testing.T) {
	f := newFake(s1())
	f.push("s1", agent.State{Status: agent.StatusIdle})
	in, typed := io.Pipe()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- Run(t.Context(), f, Options{Input: in, Output: out, Session: "s1"}) }()

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited 5 s for %s; output %q", what, out.String())
			}
		}
	}
	waitFor("the status bar", func() bool { return strings.Contains(out.String(), "session s1 · fix tests · linux · idle") })
	if _, err := typed.Write([]byte("hi\r")); err != nil {
		t.Fatal(err)
	}
	waitFor("Send", func() bool { return hasCall(f, "Send s1 hi") })
	if _, err := typed.Write([]byte{0x03}); err != nil { // ctrl+c
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after ctrl+c")
	}
	for _, c := range f.called() {
		if strings.HasPrefix(c, "Destroy") {
			t.Errorf("quitting called %s", c)
		}
	}
}

// TestRunCancel: Run ends with its context.
func TestRunCancel(t *testing.T) {
	f := newFake(s1())
	in, _ := io.Pipe()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, f, Options{Input: in, Output: io.Discard}) }()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Run: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run goes on after its context ended")
	}
}

// TestEnded: a session whose workflow ended on its own says why, and
// its Wait is not tried again.
func TestEnded(t *testing.T) {
	f := newFake(session.Info{ID: "s1", Title: "old", Provider: "linux", Status: session.StatusEnded, Error: "NoModel: no model configured"})
	f.fail("Wait", errBoom)
	d := drive(t, f, Options{})
	d.shows("* s1  old  linux  ended: NoModel: no model configured")
	d.key(tea.KeyEnter)
	d.shows("the session has ended: NoModel: no model configured", "session s1 · old · linux · ended")
	d.settle()
	if d.m.retry != firstRetry || strings.Contains(d.view(), "error:") {
		t.Errorf("the Wait of an ended session failed as an error, to try again (retry %v):\n%s", d.m.retry, d.view())
	}
}

// TestQueued: a message sent during a turn shows as queued until its own
// turn starts, and the view fills the terminal, no more.
func TestQueued(t *testing.T) {
	f := newFake(s1())
	f.push("s1", agent.State{Status: agent.StatusIdle})
	d := drive(t, f, Options{Session: "s1"})
	d.shows("· idle")
	d.typ("first")
	d.until("Send", func(string) bool { return hasCall(f, "Send s1 first") })
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: agent.TurnState{Number: 1, Status: agent.StatusThinking, Message: "first"}})
	d.shows("you: first", "thinking…")
	d.typ("second")
	d.shows("you: second", "(queued as turn 2)")
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: agent.TurnState{Number: 2, Status: agent.StatusThinking, Message: "second"},
		Turns: []agent.TurnState{{Number: 1, Status: agent.StatusDone, Message: "first", Answer: "one"}}})
	d.shows("you: first", "one", "you: second", "thinking…")
	if v := d.view(); strings.Contains(v, "queued") || strings.Count(v, "you: second") != 1 {
		t.Errorf("the second message shows as queued once its turn started:\n%s", v)
	}
	if n := strings.Count(d.m.View(), "\n") + 1; n != 30 {
		t.Errorf("the view has %d lines, the terminal 30", n)
	}
}

// TestLongList: the list shows the rows that fit, the chosen one among
// them.
func TestLongList(t *testing.T) {
	var infos []session.Info
	for i := 1; i <= 50; i++ {
		infos = append(infos, session.Info{ID: fmt.Sprintf("s%d", i), Title: fmt.Sprintf("t%d", i), Provider: "linux", Status: session.StatusActive})
	}
	d := drive(t, newFake(infos...), Options{})
	d.shows("* s1 ")
	for range 40 {
		d.send(tea.KeyMsg{Type: tea.KeyDown})
	}
	d.shows("* s41 ", "q quit")
	if n := strings.Count(d.m.View(), "\n") + 1; n > 30 {
		t.Errorf("the list has %d lines, the terminal 30", n)
	}
	if strings.Contains(d.view(), " s1 ") {
		t.Errorf("s1 shows, 40 rows above the cursor:\n%s", d.view())
	}
}
