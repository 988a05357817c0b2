package agent_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/transfer"
)

// readStored reads a text a session's state names as stored, whole,
// through the session's relay, as a front end does.
func (s *session) readStored(st *chat.Stored) string {
	s.h.T.Helper()
	if st == nil {
		s.h.T.Fatal("nothing stored")
	}
	var out []byte
	for int64(len(out)) < st.Size {
		v, err := s.h.C.QueryWorkflow(s.h.T.Context(), s.id, "", transfer.QueryRead,
			transfer.ReadRequest{Key: st.Key, Offset: int64(len(out)), Max: transfer.MaxChunk})
		if err != nil {
			s.h.T.Fatalf("read %s: %v", st.Key, err)
		}
		var b []byte
		if err := v.Get(&b); err != nil || len(b) == 0 {
			s.h.T.Fatalf("read %s at %d: %d bytes, %v", st.Key, len(out), len(b), err)
		}
		out = append(out, b...)
	}
	return string(out)
}

// Answers too long for history (1.5 MB, 3 MB) are kept out of it: the
// turn's state carries their start and where they are stored, readable
// whole; a tool call's long arguments too. An answer past the model's
// bound (item 6) fails its turn at once, in one line, not retried. The
// session goes on serving throughout: state, send, continue-as-new,
// end.
func TestSessionLargeAnswers(t *testing.T) {
	h := newHarness(t)
	text := func(n int, c string) string { return strings.Repeat(c+"23456789 ", n/10) }
	medium, large := text(1_500_000, "m"), text(3_000_000, "l")
	longCommand := "echo " + strings.Repeat("a", 10<<10) + " | wc -c"
	h.Model.Script(
		fakemodel.Reply{Text: medium, Piece: 64 << 10},
		fakemodel.Reply{Text: large, Piece: 64 << 10},
		fakemodel.Reply{Text: strings.Repeat("x", model.DefaultMaxText+1), Piece: 64 << 10},
		fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{shell("long", longCommand)}},
		fakemodel.Reply{Text: "counted"},
	)
	// Continuing as new after each turn carries the state across runs.
	s := h.start(agent.SessionInput{ContinueAfter: 10})

	for i, want := range []string{medium, large} {
		n := s.send("say a lot")
		got := s.turn(n)
		if got.Status != agent.StatusDone || got.AnswerStored == nil || got.AnswerStored.Size != int64(len(want)) {
			t.Fatalf("turn %d: status %s, error %q, stored %+v; want done, %d bytes stored", n, got.Status, got.Error, got.AnswerStored, len(want))
		}
		if len(got.Answer) > chat.MaxInlineText+64 || !strings.HasPrefix(want, strings.TrimRight(got.Answer[:chat.MaxInlineText/2], "\n")) {
			t.Errorf("turn %d's state carries %d bytes of the answer, want its start, about %d", n, len(got.Answer), chat.MaxInlineText)
		}
		if whole := s.readStored(got.AnswerStored); whole != want {
			t.Errorf("answer %d read whole: %d bytes, want %d", i, len(whole), len(want))
		}
	}

	n := s.send("say too much")
	got := s.turn(n)
	if got.Status != agent.StatusFailed || !strings.HasPrefix(got.Error, string(errdefs.AnswerTooLarge)+": model: the answer's text passed 4194304 bytes") ||
		strings.Contains(got.Error, "\n") {
		t.Errorf("turn %d past the model's bound: status %s, error %q; want failed, AnswerTooLarge, one line", n, got.Status, got.Error)
	}
	if reqs := len(h.Model.Requests()); reqs != 3 {
		t.Errorf("%d model calls for three turns: the answer past the bound was asked again", reqs)
	}

	n = s.send("count it")
	got = s.turn(n)
	if got.Status != agent.StatusDone || got.Answer != "counted" || len(got.Calls) != 1 {
		t.Fatalf("turn %d after the failed one: %+v", n, got)
	}
	c := got.Calls[0]
	if len(c.Arguments) > chat.MaxInlineArguments+64 || c.ArgumentsStored == nil {
		t.Errorf("the call's state carries %d bytes of arguments, stored %+v: want their start and where they are", len(c.Arguments), c.ArgumentsStored)
	} else if args := s.readStored(c.ArgumentsStored); !strings.Contains(args, longCommand[:100]) || !json.Valid([]byte(args)) {
		t.Errorf("the call's arguments read whole: %d bytes", len(args))
	}
	if !strings.Contains(c.Output, "10241") {
		t.Errorf("the long command's output %q", c.Output)
	}

	st := s.state()
	if st.Runs < 2 {
		t.Errorf("%d runs: the session did not continue as new", st.Runs)
	}
	b, _ := json.Marshal(st)
	if len(b) > 256<<10 {
		t.Errorf("the state is %d bytes", len(b))
	}
	if bytes.Contains(b, []byte(medium[:chat.MaxInlineText+100])) {
		t.Error("the state carries an answer past its inline bound")
	}
	var res agent.EndResult
	if err := s.update(t.Context(), agent.UpdateEnd, agent.EndRequest{Destroy: true}, &res); err != nil {
		t.Errorf("end: %v", err)
	}
}

// The messages waiting for their turn, carried across continue-as-new,
// are bounded: past the bound a message is refused with BadInput, and
// the session goes on.
func TestSessionQueueBound(t *testing.T) {
	h := newHarness(t)
	gate := h.Model.Hold()
	var replies []fakemodel.Reply
	for range 10 {
		replies = append(replies, fakemodel.Reply{Text: "ok"})
	}
	h.Model.Script(replies...)
	s := h.start(agent.SessionInput{})
	s.send("first")
	<-gate.Arrived()
	msg := strings.Repeat("q", 15<<10)
	for i := range 8 {
		if err := s.update(t.Context(), agent.UpdateSend, agent.SendRequest{Message: msg}, nil); err != nil {
			t.Fatalf("queued message %d: %v", i+1, err)
		}
	}
	err := s.update(t.Context(), agent.UpdateSend, agent.SendRequest{Message: "one more"}, nil)
	if err == nil || temporalerr.KindOf(err) != errdefs.BadInput || !strings.Contains(err.Error(), "8 messages wait") {
		t.Errorf("a ninth queued message: %v, want BadInput", err)
	}
	gate.Release()
	if t9 := s.turn(9); t9.Status != agent.StatusDone {
		t.Fatalf("turn 9: %+v", t9)
	}
	if n := s.send("after"); n != 10 {
		t.Errorf("the message after the queue emptied is turn %d, want 10", n)
	}
}
