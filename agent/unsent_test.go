package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/agent/chat"
)

// Failed turns leave their messages for the next; past maxUnsent the
// oldest of the person's go, never the last, a tool result or the
// system prompt.
func TestTrimUnsent(t *testing.T) {
	big := strings.Repeat("u", MaxMessage)
	unsent := []chat.Message{{Role: chat.RoleSystem, Content: "be brief"},
		{Role: chat.RoleTool, ToolCallID: "c", Content: strings.Repeat("t", 16<<10)}}
	for range 2 * maxUnsent / MaxMessage {
		unsent = append(unsent, chat.Message{Role: chat.RoleUser, Content: big})
	}
	unsent = append(unsent, chat.Message{Role: chat.RoleUser, Content: "the last"})
	got := trimUnsent(unsent)
	size := 0
	for _, m := range got {
		size += len(m.Content)
	}
	if size > maxUnsent {
		t.Errorf("%d bytes kept, want at most %d", size, maxUnsent)
	}
	if got[0].Role != chat.RoleSystem || got[1].Role != chat.RoleTool || got[len(got)-1].Content != "the last" {
		t.Errorf("kept %d messages, not the system prompt, the tool result and the last", len(got))
	}
	if short := unsent[:3]; len(trimUnsent(short)) != 3 {
		t.Error("messages under the bound were dropped")
	}
}

// What a session carries across continue-as-new, and its state, at
// their largest, fit a payload (2 MiB): each part is bounded, and
// together they must be too.
func TestCarriedBound(t *testing.T) {
	fill := func(n int) string { return strings.Repeat("é", n) } // two bytes a rune, cut in two
	stored := &chat.Stored{Key: "outputs/agent/" + fill(100), Size: 1 << 30}
	var calls []CallState
	for range maxStateCalls {
		calls = append(calls, CallState{ID: fill(128), Name: fill(128), Arguments: cut(fill(1<<20), chat.MaxInlineArguments),
			ArgumentsStored: stored, Status: StatusDone, Said: cut(fill(1<<20), maxStateOutput),
			Stdout: fill(100), Stderr: fill(100), Output: cut(fill(1<<20), maxStateOutput), Failed: true})
	}
	turn := TurnState{Number: 1, Status: StatusDone, Message: fill(MaxMessage / 2), Calls: calls,
		Answer:       answerOf(chat.Response{Message: chat.Message{Content: head(fill(1<<20), chat.MaxInlineText)}, Text: stored}),
		AnswerStored: stored, Stream: fill(100), Error: cut(fill(1<<20), maxStateError)}
	s := &session{turn: turn}
	for range keptTurns + 1 {
		s.finish(StatusFailed, turn.Answer, fill(1<<20), nil)
	}
	s.turn = turn
	for range maxQueued {
		s.queue = append(s.queue, queued{Message: fill(maxQueuedBytes / maxQueued / 2)})
	}
	var unsent []chat.Message
	for range chat.MaxToolCalls {
		unsent = append(unsent, chat.Message{Role: chat.RoleTool, Content: fill(16 << 9)}) // tools.MaxOutput
	}
	for range 20 {
		unsent = append(unsent, chat.Message{Role: chat.RoleUser, Content: fill(MaxMessage / 2)})
	}
	s.unsent = trimUnsent(unsent)
	for range keptAnswers {
		s.answers = append(s.answers, Answered{ID: fill(100), Result: []byte(`"` + fill(maxAnswer/2-2) + `"`)})
	}
	c := Carried{Conversation: make([]chat.Segment, chat.MaxSegments), Unsent: s.unsent, Queue: s.queue,
		Turn: s.turn, Turns: s.turns, Answers: s.answers}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// Room is left for the sandbox's carried state and the envelope.
	if len(b) > 7<<18 {
		t.Errorf("carried at its largest: %d bytes, want at most 1.75 MiB", len(b))
	}
	st, _ := s.state()
	if b, _ := json.Marshal(st); len(b) > 1<<20 {
		t.Errorf("the state at its largest: %d bytes, want at most 1 MiB", len(b))
	}
}
