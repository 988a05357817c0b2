package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/internal/termtext"
)

// turnEvent is one line of send's -o jsonl.
type turnEvent struct {
	// Type is turn, text (the model's text, as it comes: the answer,
	// or what it says before tool calls), call, stdout, stderr (a
	// running command's output, as it comes), approval, output (what the
	// model was given), answer or error.
	Type      string `json:"type"`
	Session   string `json:"session,omitempty"`
	Turn      int    `json:"turn,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Data      string `json:"data,omitempty"`
	Output    string `json:"output,omitempty"`
	Failed    bool   `json:"failed,omitempty"`
	Text      string `json:"text,omitempty"`
	Error     string `json:"error,omitempty"`
	Tokens    int64  `json:"tokens,omitempty"`
	// Streamed says, in text, that the answer was printed as it came.
	Streamed bool `json:"-"`
}

// readFunc reads a stored stream from an offset: what is there, or
// nothing yet.
type readFunc func(ctx context.Context, key string, offset int64) ([]byte, error)

// turnPrinter prints a turn's tool activity as the states it is shown
// reveal it: each call when it starts, a command's output as it runs
// (read from its stored streams), the call's result when it ends.
//
// In text, for people, what came from the model or the sandbox is made
// safe for the terminal: the text and the output cleaned of escape
// sequences and control characters (termtext), a command shown with
// every character visible. -o jsonl gives it exactly, for programs.
type turnPrinter struct {
	ctx     context.Context
	read    readFunc
	jsonl   bool
	session string // as the user named it, for the approval hint
	turn    int

	mu       sync.Mutex // w, atLine, err: live output is printed from its own goroutine
	w        io.Writer
	atLine   bool // the text printed last ended a line
	err      error
	seen     map[string]string    // call id -> the status printed
	live     map[string]*liveCall // calls whose output is followed
	streamed map[string]bool      // calls whose output was printed live; text streams followed
	textKey  string               // the model's text stream followed now
	// textBytes counts the text printed of each stream, to know an
	// answer printed whole as it streamed.
	textBytes map[string]int
	// filters clean each stream printed live, in text: a sequence may
	// be cut between two reads.
	filters map[string]*termtext.Filter
}

func newTurnPrinter(ctx context.Context, w io.Writer, jsonl bool, session string, turn int, read readFunc) *turnPrinter {
	return &turnPrinter{ctx: ctx, read: read, jsonl: jsonl, session: session, turn: turn, w: w, atLine: true,
		seen: map[string]string{}, live: map[string]*liveCall{}, streamed: map[string]bool{}, textBytes: map[string]int{},
		filters: map[string]*termtext.Filter{}}
}

// liveCall follows a running command's two streams, or the model's
// text.
type liveCall struct {
	id     string
	keys   [2]string
	off    [2]int64
	cancel context.CancelFunc
	done   chan struct{}
}

func (p *turnPrinter) see(st agent.State) error {
	if st.Turn.Number != p.turn {
		return nil
	}
	// A step's text comes before its calls, the next step's after them.
	p.endText(st.Turn)
	for _, c := range st.Turn.Calls {
		if err := p.changed(c); err != nil {
			return err
		}
		if c.Status == agent.StatusRunning && c.Stdout != "" && p.live[c.ID] == nil {
			p.follow(c.ID, [2]string{c.Stdout, c.Stderr})
		}
	}
	p.startText(st.Turn)
	return p.failed()
}

// textID is the live id of the model's text streamed to key.
func textID(key string) string { return "text " + key }

// endText reads the model's text followed to its end, once its step is
// over: the turn no longer thinking, or thinking on another step.
func (p *turnPrinter) endText(t agent.TurnState) {
	if p.textKey != "" && (t.Status != agent.StatusThinking || t.Stream != p.textKey) {
		p.catchUp(textID(p.textKey))
		p.textKey = ""
	}
}

// startText follows the model's text as it streams, while it is called.
func (p *turnPrinter) startText(t agent.TurnState) {
	if t.Status == agent.StatusThinking && t.Stream != "" && p.textKey == "" && !p.streamed[textID(t.Stream)] {
		p.textKey = t.Stream
		p.streamed[textID(t.Stream)] = true // followed once
		p.follow(textID(t.Stream), [2]string{t.Stream})
	}
}

// changed prints what is new of a call's status.
func (p *turnPrinter) changed(c agent.CallState) error {
	if p.seen[c.ID] == c.Status {
		return nil
	}
	if _, ok := p.seen[c.ID]; !ok {
		if err := p.event(turnEvent{Type: "call", CallID: c.ID, Name: c.Name, Arguments: c.Arguments}); err != nil {
			return err
		}
	}
	p.seen[c.ID] = c.Status
	switch c.Status {
	case agent.StatusApproval:
		return p.event(turnEvent{Type: "approval", CallID: c.ID, Name: c.Name})
	case agent.StatusDone, agent.StatusDenied:
		p.catchUp(c.ID)
		return p.event(turnEvent{Type: "output", CallID: c.ID, Output: c.Output, Failed: c.Failed})
	}
	return nil
}

// follow prints what is stored of a live id's streams (a running
// call's stdout and stderr, or the model's text) as it comes, until
// catchUp.
func (p *turnPrinter) follow(id string, keys [2]string) {
	ctx, cancel := context.WithCancel(p.ctx)
	l := &liveCall{id: id, keys: keys, cancel: cancel, done: make(chan struct{})}
	p.live[id] = l
	go func() {
		defer close(l.done)
		for ctx.Err() == nil {
			p.poll(ctx, l)
			select {
			case <-ctx.Done():
			case <-time.After(berth.LiveEvery):
			}
		}
	}()
}

// poll prints what is new of a call's streams.
func (p *turnPrinter) poll(ctx context.Context, l *liveCall) {
	for i, key := range l.keys {
		for key != "" {
			b, err := p.read(ctx, key, l.off[i])
			if err != nil || len(b) == 0 {
				break // the rest comes later
			}
			l.off[i] += int64(len(b))
			p.data(l.id, i, b)
		}
	}
}

// catchUp stops following a call that ended, after printing the rest of
// its streams.
func (p *turnPrinter) catchUp(id string) {
	l := p.live[id]
	if l == nil {
		return
	}
	l.cancel()
	<-l.done
	p.poll(p.ctx, l)
	delete(p.live, id)
}

// stop stops following every call.
func (p *turnPrinter) stop() {
	for _, l := range p.live {
		l.cancel()
		<-l.done
	}
}

// data prints a piece of a running command's output.
func (p *turnPrinter) data(id string, stream int, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return
	}
	key, isText := strings.CutPrefix(id, "text ")
	if isText {
		p.textBytes[key] += len(b)
	} else {
		p.streamed[id] = true
	}
	if p.jsonl {
		e := turnEvent{Type: streamNames[stream], CallID: id, Data: string(b)}
		if isText {
			e = turnEvent{Type: "text", Data: string(b)}
		}
		p.err = writeJSON(p.w, e)
		return
	}
	fk := fmt.Sprint(id, stream)
	f := p.filters[fk]
	if f == nil {
		f = new(termtext.Filter)
		p.filters[fk] = f
	}
	var out strings.Builder
	for _, r := range string(f.Append(nil, b)) {
		if p.atLine && !isText {
			out.WriteString("  ")
		}
		out.WriteRune(r)
		p.atLine = r == '\n'
	}
	_, p.err = io.WriteString(p.w, out.String())
}

func (p *turnPrinter) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// finish prints the answer, or fails with the turn's error.
func (p *turnPrinter) finish(t agent.TurnState) error {
	if err := p.see(agent.State{Turn: t}); err != nil {
		return err
	}
	if t.Status == agent.StatusFailed {
		if p.jsonl {
			if err := p.event(turnEvent{Type: "error", Turn: t.Number, Error: t.Error}); err != nil {
				return err
			}
			return exitError{exitBerth}
		}
		return fmt.Errorf("turn %d: %s", t.Number, t.Error)
	}
	e := turnEvent{Type: "answer", Turn: t.Number, Text: t.Answer, Tokens: t.Usage.TotalTokens}
	p.mu.Lock()
	// The answer was printed as it streamed: only the end of its line.
	e.Streamed = t.Stream != "" && p.textBytes[t.Stream] == len(t.Answer) && t.Answer != ""
	p.mu.Unlock()
	return p.event(e)
}

// event prints one event, as a JSON line or as text.
func (p *turnPrinter) event(e turnEvent) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	if p.jsonl {
		p.err = writeJSON(p.w, e)
		return p.err
	}
	var text string
	switch e.Type {
	case "call":
		text = callLine(e.Name, e.Arguments) + "\n"
	case "approval":
		text = fmt.Sprintf("  awaiting approval: berth session approve %[1]s %[2]s (or deny %[1]s %[2]s)\n", p.session, e.CallID)
	case "output":
		out := strings.TrimRight(termtext.Clean(e.Output), "\n")
		if p.streamed[e.CallID] {
			// Its output was printed as it came: only how it ended.
			out, _, _ = strings.Cut(out, "\n")
		}
		if out != "" {
			text = indent(out, "  ") + "\n"
		}
	case "answer":
		text = strings.TrimRight(termtext.Clean(e.Text), "\n") + "\n"
		if e.Streamed {
			text = ""
			if !p.atLine {
				text = "\n"
			}
		}
	}
	if text != "" && text != "\n" && !p.atLine {
		text = "\n" + text
	}
	if text != "" {
		_, p.err = io.WriteString(p.w, text)
		p.atLine = true
	}
	return p.err
}

// callLine shows a tool call: a shell command whole, as it would be
// typed, with every character visible (termtext.Command), its lines
// after the first indented; others in one line, by name and arguments.
func callLine(name, args string) string {
	if name == tools.Shell {
		var a struct {
			Command string `json:"command"`
		}
		if json.Unmarshal([]byte(args), &a) == nil && a.Command != "" {
			return "$ " + indent(termtext.Command(a.Command), "  ")[2:]
		}
	}
	return "[tool] " + termtext.Clean(name) + " " + flatten(termtext.Clean(args))
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
