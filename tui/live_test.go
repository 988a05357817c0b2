package tui

import (
	"fmt"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/berth-dev/berth/agent"
)

const (
	stdoutKey = "outputs/sb1/run1/stdout"
	stderrKey = "outputs/sb1/run1/stderr"
	streamKey = "outputs/agent/conv1/turn-1-step-1"
)

// during handles the commands' messages for a while.
func (d *driver) during(dur time.Duration) {
	end := time.After(dur)
	for {
		select {
		case msg := <-d.msgs:
			d.send(msg)
		case <-end:
			return
		}
	}
}

// runningShell is a state with a shell call running, its output at
// stdoutKey and stderrKey.
func runningShell() (agent.State, agent.TurnState, agent.CallState) {
	c := agent.CallState{ID: "c1", Name: "shell", Arguments: `{"command":"go test ./..."}`, Status: agent.StatusRunning,
		Stdout: stdoutKey, Stderr: stderrKey}
	turn := agent.TurnState{Number: 1, Status: agent.StatusRunning, Tool: "shell", Message: "make the tests pass",
		Calls: []agent.CallState{c}}
	return agent.State{Status: agent.StatusRunning, Turn: turn}, turn, c
}

// quiet checks that nothing reads key any more.
func quiet(t *testing.T, d *driver, f *fake, key string) {
	t.Helper()
	d.during(2 * liveEvery) // a read in flight ends
	n := f.readCount(key)
	d.during(4 * liveEvery)
	if m := f.readCount(key); m != n {
		t.Errorf("%s read %d more times after it stopped being followed", key, m-n)
	}
	if d.m.reading || len(d.m.lives) != 0 {
		t.Errorf("still following %d streams (reading %v)", len(d.m.lives), d.m.reading)
	}
}

// TestLiveOutput shows a running command's stdout and stderr as they
// grow, with no new state, then its final output in their place; the
// reads stop with the call.
func TestLiveOutput(t *testing.T) {
	f := newFake(s1())
	st, turn, c := runningShell()
	f.push("s1", st)
	d := drive(t, f, Options{Session: "s1"})
	d.shows("$ go test ./...", "running…", "· running shell")

	f.write(stdoutKey, "=== RUN   TestAdd\n")
	d.shows("  === RUN   TestAdd")
	f.write(stdoutKey, "--- FAIL: TestAdd\nbuilding 10%\rbuilding 90%")
	f.write(stderrKey, "warning: slow\n")
	d.shows("  --- FAIL: TestAdd", "  building 90%", "  warning: slow")
	v := d.view()
	if strings.Contains(v, "building 10%") {
		t.Errorf("a line written over with \\r shows its old text:\n%s", v)
	}
	if i, j, k := strings.Index(v, "=== RUN"), strings.Index(v, "warning: slow"), strings.Index(v, "running…"); !(i < j && j < k) {
		t.Errorf("stdout, stderr and running… out of order (%d, %d, %d):\n%s", i, j, k, v)
	}
	if d.m.state.Version != 1 {
		t.Errorf("the state is at Version %d: the output came through Read, not Wait", d.m.state.Version)
	}

	c.Status, c.Output, c.Failed = agent.StatusDone, "--- FAIL: TestAdd (final)\nexit status 1", true
	turn.Status, turn.Tool, turn.Calls = agent.StatusThinking, "", []agent.CallState{c}
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: turn})
	d.shows("  --- FAIL: TestAdd (final)", "  exit status 1", "thinking…")
	v = d.view()
	for _, s := range []string{"=== RUN", "warning: slow", "running…"} {
		if strings.Contains(v, s) {
			t.Errorf("the call is done but its live output %q still shows:\n%s", s, v)
		}
	}
	if f.readCount(stdoutKey) == 0 || f.readCount(stderrKey) == 0 {
		t.Errorf("stdout read %d times, stderr %d", f.readCount(stdoutKey), f.readCount(stderrKey))
	}
	quiet(t, d, f, stdoutKey)
	quiet(t, d, f, stderrKey)
}

// TestStreamedAnswer shows the model's text as it writes it, while the
// turn thinks, then the turn's answer once in its place.
func TestStreamedAnswer(t *testing.T) {
	f := newFake(s1())
	turn := agent.TurnState{Number: 1, Status: agent.StatusThinking, Message: "fix it", Stream: streamKey}
	f.push("s1", agent.State{Status: agent.StatusThinking, Turn: turn})
	d := drive(t, f, Options{Session: "s1"})
	d.shows("you: fix it", "thinking…")

	f.write(streamKey, "Fixed Add")
	d.shows("Fixed Add", "thinking…")
	f.write(streamKey, "; the tests pass. Caf\xc3") // a rune cut between two reads
	d.shows("the tests pass. Caf")
	if v := d.view(); strings.ContainsRune(v, '\uFFFD') {
		t.Errorf("half a rune shows as U+FFFD:\n%s", v)
	}
	f.write(streamKey, "\xa9 \x1b]0;pwned\x07\x1b[31mred\x1b[0m")
	d.shows("Fixed Add; the tests pass. Café red")
	v := d.view()
	if strings.Index(v, "Fixed Add") > strings.Index(v, "thinking…") {
		t.Errorf("the answer under way shows after thinking…:\n%s", v)
	}
	if raw := transcript(d.m.state, nil, d.m.liveText, 80); strings.ContainsAny(raw, "\x1b\x07") || strings.Contains(raw, "pwned") || strings.Contains(raw, "[31m") {
		t.Errorf("escape sequences reach the terminal: %q", raw)
	}

	turn.Status, turn.Answer = agent.StatusDone, "Fixed Add; the tests pass."
	done := turn
	f.push("s1", agent.State{Status: agent.StatusIdle, Turn: turn, Turns: []agent.TurnState{done}})
	d.shows("· idle")
	v = d.view()
	if n := strings.Count(v, "Fixed Add"); n != 1 || strings.Contains(v, "thinking…") || strings.Contains(v, "Café") {
		t.Errorf("the answer shows %d times, or the text under way still shows:\n%s", n, v)
	}
	quiet(t, d, f, streamKey)
}

// TestLiveBounded keeps the last maxLive bytes of a stream, however much
// it brings, and catches up with one far ahead without waiting a tick a
// chunk.
func TestLiveBounded(t *testing.T) {
	f := newFake(s1())
	st, _, _ := runningShell()
	f.push("s1", st)
	d := drive(t, f, Options{Session: "s1"})
	d.shows("running…")

	var b strings.Builder
	for i := range 200_000 { // 2.4 MB: five chunks of a Read
		fmt.Fprintf(&b, "line %06d\n", i)
	}
	f.write(stdoutKey, b.String())
	start, ticks := time.Now(), d.ticks
	d.shows("line 199999")
	t.Logf("caught up in %v", time.Since(start))
	if n := d.ticks - ticks; n > 1 {
		t.Errorf("caught up after %d ticks: a tick a chunk", n)
	}
	l := d.m.lives[stdoutKey]
	if l == nil {
		t.Fatal("stdout is not followed")
	}
	if len(l.buf) > maxLive || !l.cut || l.off != int64(b.Len()) {
		t.Fatalf("stdout: %d bytes kept of %d read (cut %v), want at most %d", len(l.buf), l.off, l.cut, maxLive)
	}
	raw := transcript(d.m.state, nil, d.m.liveText, 80)
	if strings.Contains(raw, "line 000000") || !strings.Contains(raw, "  …\n") {
		t.Errorf("the view shows the start of the stream, or does not say it is cut:\n%.300s", raw)
	}
	if len(raw) > 2*maxLive {
		t.Errorf("the view holds %d bytes of a stream kept to %d", len(raw), maxLive)
	}
}

// TestLiveStops: a failing Read says nothing on the error line and is
// tried again; leaving the session stops the reads.
func TestLiveStops(t *testing.T) {
	f := newFake(s1())
	st, _, _ := runningShell()
	f.push("s1", st)
	f.fail("Read", errBoom)
	d := drive(t, f, Options{Session: "s1"})
	d.shows("running…")
	d.during(4 * liveEvery)
	if n := f.readCount(stdoutKey); n < 2 {
		t.Errorf("stdout read %d times in %v", n, 4*liveEvery)
	}
	if v := d.view(); strings.Contains(v, "error:") {
		t.Errorf("a failing Read shows on the error line:\n%s", v)
	}

	f.fail("Read", nil)
	f.write(stdoutKey, "ok at last\n")
	d.shows("  ok at last")

	d.key(tea.KeyEsc)
	d.shows("berth chat: sessions")
	quiet(t, d, f, stdoutKey)
	quiet(t, d, f, stderrKey)

	// Opening it again follows it again, from the start.
	d.key(tea.KeyEnter)
	d.shows("  ok at last")
	d.key(tea.KeyCtrlC)
	quiet(t, d, f, stdoutKey)
}
