package tui

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/internal/termtext"
	"github.com/berth-dev/berth/session"
)

// maxArgs caps the arguments a non-shell call shows, on one line: a
// write_file's content can be the whole file.
const maxArgs = 200

// approvalLines is the length past which a command awaiting approval
// says how long it is: its start may be above the screen.
const approvalLines = 10

// pending is a message sent but not yet in the state: Turn is zero until
// the session has accepted it.
type pending struct {
	Turn    int
	Message string
}

// liveFunc is what a stream followed live brought so far (its last
// bytes), and whether its start was cut; ok is false for a stream not
// followed.
type liveFunc func(key string) (text string, cut bool)

// transcript renders the conversation: the finished turns, the current
// one with its calls and what its streams brought so far (live may be
// nil), then the messages not in the state yet, wrapped to width.
func transcript(st agent.State, sent []pending, live liveFunc, width int) string {
	if live == nil {
		live = func(string) (string, bool) { return "", false }
	}
	var b strings.Builder
	line := func(prefix, text string) { writeWrapped(&b, prefix, text, width) }
	for _, t := range st.Turns {
		if t.Number == st.Turn.Number {
			continue // the current turn, shown with its calls below
		}
		line("you: ", t.Message)
		ending(line, t)
		b.WriteByte('\n')
	}
	if t := st.Turn; t.Number > 0 {
		line("you: ", t.Message)
		for _, c := range t.Calls {
			call(line, c, live)
		}
		switch t.Status {
		case agent.StatusThinking:
			// The answer as the model writes it, until it is the turn's.
			if text, cut := live(t.Stream); strings.TrimSpace(text) != "" {
				if cut {
					line("", "…")
				}
				line("", strings.TrimRight(text, "\n"))
			}
			line("", "thinking…")
		case agent.StatusRunning:
			// the running call says so
		case agent.StatusApproval:
			// the call awaiting approval says so
		default:
			ending(line, t)
		}
		b.WriteByte('\n')
	}
	for _, p := range sent {
		line("you: ", p.Message)
		if p.Turn == 0 {
			line("", "(sending)")
		} else {
			line("", fmt.Sprintf("(queued as turn %d)", p.Turn))
		}
		b.WriteByte('\n')
	}
	if n := st.Queued - queuedShown(sent); n > 0 {
		line("", fmt.Sprintf("(%d more messages wait for their turn)", n))
	}
	if st.Ended {
		line("", "the session has ended")
	}
	return strings.TrimRight(b.String(), "\n")
}

// queuedShown counts the sent messages the session has queued.
func queuedShown(sent []pending) int {
	n := 0
	for _, p := range sent {
		if p.Turn > 0 {
			n++
		}
	}
	return n
}

// ending renders how a finished turn ended.
func ending(line func(prefix, text string), t agent.TurnState) {
	switch t.Status {
	case agent.StatusDone:
		line("", t.Answer)
	case agent.StatusFailed:
		line("failed: ", t.Error)
	}
}

// call renders a tool call, after what the model said before it if
// anything: "$ <command>" for shell, "[tool] <name>
// <arguments>" for the others, then its output indented (while it runs,
// its stdout and stderr as they grow; once done, its Output), and what
// it waits for.
func call(line func(prefix, text string), c agent.CallState, live liveFunc) {
	if c.Said != "" {
		line("", c.Said) // what the model said before the call
	}
	lines := 1 // of the command
	if c.Name == tools.Shell {
		var args struct {
			Command string `json:"command"`
		}
		if json.Unmarshal([]byte(c.Arguments), &args) == nil && args.Command != "" {
			// Every character of the command shows, so that what is
			// approved is what runs.
			shown := termtext.Command(args.Command)
			lines = strings.Count(shown, "\n") + 1
			line("$ ", shown)
		} else {
			line("$ ", oneLine(c.Arguments, maxArgs))
		}
	} else {
		line("[tool] ", c.Name+" "+oneLine(c.Arguments, maxArgs))
	}
	if out := strings.TrimRight(c.Output, "\n"); out != "" {
		line("  ", out)
	}
	switch c.Status {
	case agent.StatusRunning:
		for _, k := range []string{c.Stdout, c.Stderr} {
			if k == "" {
				continue
			}
			if text, cut := live(k); text != "" {
				if cut {
					line("  ", "…")
				}
				line("  ", strings.TrimRight(overwritten(text), "\n"))
			}
		}
		line("  ", "running…")
	case agent.StatusApproval:
		if lines > approvalLines {
			line("  ", fmt.Sprintf("awaiting approval of a command of %d lines (pgup to read it all): /approve or /deny", lines))
		} else {
			line("  ", "awaiting approval: /approve or /deny")
		}
	case agent.StatusDenied:
		line("  ", "denied")
	}
	if c.Failed {
		line("  ", "(failed)")
	}
}

// statusBar is "session <id> · <title> · <provider> · <status>", cut to
// width.
func statusBar(info session.Info, st agent.State, have bool, width int) string {
	status := info.Status
	if have && (status == "" || status == session.StatusActive) {
		status = st.Status
		if status == agent.StatusRunning && st.Turn.Tool != "" {
			status += " " + st.Turn.Tool
		}
		if st.Ended {
			status = session.StatusEnded
		}
	}
	s := fmt.Sprintf("session %s · %s · %s · %s", info.ID, info.Title, info.Provider, status)
	return ansi.Truncate(s, width, "…")
}

// writeWrapped writes text, made safe for the terminal, wrapped to
// width: its first line after prefix, the others indented as deep.
func writeWrapped(b *strings.Builder, prefix, text string, width int) {
	indent := strings.Repeat(" ", ansi.StringWidth(prefix))
	room := max(width-len(indent), 10)
	first := true
	for _, l := range strings.Split(clean(text), "\n") {
		for _, w := range strings.Split(ansi.Wrap(l, room, ""), "\n") {
			if first {
				b.WriteString(prefix)
				first = false
			} else {
				b.WriteString(indent)
			}
			b.WriteString(w)
			b.WriteByte('\n')
		}
	}
}

// overwritten is a command's output as a terminal would leave it where
// a line is written over with a carriage return (a progress bar): each
// line's text after its last lone "\r".
func overwritten(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	for i, l := range lines {
		if j := strings.LastIndexByte(strings.TrimRight(l, "\r"), '\r'); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	return strings.Join(lines, "\n")
}

// clean makes text from a model or a sandbox, both untrusted, safe to
// print (termtext.Clean: no escape sequence, no control character), with
// tabs as spaces, whose width the wrapping must know.
func clean(s string) string {
	return strings.ReplaceAll(termtext.Clean(s), "\t", "    ")
}

// oneLine is s on one line, cut to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(clean(s)), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
