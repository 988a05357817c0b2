package model_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/transfer"
)

// An answer past a bound fails the call at once, not retried, in one
// line, and the activity stops reading it there: what it allocates
// follows the bound, not the answer (an answer 32 times the text's
// bound would take ten times its size to read whole).
func TestAnswerBounds(t *testing.T) {
	huge := strings.Repeat("x", 32*model.DefaultMaxText)
	// maxAlloc bounds the bytes a call allocates, loosely: the fake
	// server's, in the same process, count too; and openai-go allocates
	// some eight times the bytes it decodes, as garbage.
	const maxAlloc = 24 * model.DefaultMaxText
	var many []fakemodel.ToolCall
	for i := range model.DefaultMaxToolCalls + 1 {
		many = append(many, fakemodel.ToolCall{ID: fmt.Sprint("c", i), Name: "shell", Arguments: `{"command":"true"}`})
	}
	// Under each call's bound, over all calls' together.
	var wide []fakemodel.ToolCall
	for i := range chat.MaxCallBytes/model.DefaultMaxArguments + 1 {
		wide = append(wide, fakemodel.ToolCall{ID: fmt.Sprint("w", i), Name: "write_file",
			Arguments: `{"path":"f","content":"` + strings.Repeat("y", model.DefaultMaxArguments-100) + `"}`})
	}
	tests := []struct {
		name  string
		reply fakemodel.Reply
		says  string
	}{
		{"text", fakemodel.Reply{Text: huge, Piece: 32 << 10}, "text passed 4194304 bytes"},
		// One event (a chunk) is held whole before it is decoded: it is
		// bounded as it is read.
		{"text in one event", fakemodel.Reply{Text: huge[:3*model.DefaultMaxText], Piece: 3 * model.DefaultMaxText},
			"one event of the answer's stream is too large"},
		{"arguments", fakemodel.Reply{Piece: 32 << 10, ToolCalls: []fakemodel.ToolCall{{ID: "a", Name: "write_file",
			Arguments: `{"path":"f","content":"` + huge + `"}`}}}, "arguments of tool call 0 (write_file) passed 262144 bytes"},
		{"tool calls", fakemodel.Reply{ToolCalls: many}, "more than 16 tool calls"},
		{"arguments together", fakemodel.Reply{Piece: 32 << 10, ToolCalls: wide}, "passed 1048576 bytes together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m, _ := setup(t)
			srv.Script(tt.reply, fakemodel.Reply{Text: "a short answer"})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := complete(t, m, chat.Request{Conversation: "big", Stream: transfer.Outputs + "agent/big/turn-1-step-1",
				New: []chat.Message{{Role: chat.RoleUser, Content: "say a lot"}}})
			runtime.ReadMemStats(&after)
			ae := appErr(t, err)
			if ae.Type() != string(errdefs.AnswerTooLarge) || !ae.NonRetryable() || !strings.Contains(ae.Error(), tt.says) {
				t.Errorf("error %q (type %s, non-retryable %v): want %s, not retried, saying %q",
					ae.Error(), ae.Type(), ae.NonRetryable(), errdefs.AnswerTooLarge, tt.says)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > maxAlloc {
				t.Errorf("the call allocated %d MiB, want at most %d MiB", n>>20, maxAlloc>>20)
			} else {
				t.Logf("the call allocated %d MiB", n>>20)
			}
			// The model is not in a bad state: the next call is answered.
			resp, err := complete(t, m, chat.Request{Conversation: "big", New: []chat.Message{{Role: chat.RoleUser, Content: "briefly"}}})
			if err != nil || resp.Message.Content != "a short answer" {
				t.Errorf("the next call: %+v, %v", resp.Message, err)
			}
		})
	}
}

// An answer within the bounds but too long for history is stored whole,
// and the result carries its start and its key; so are tool calls'
// long arguments, for front ends, the result carrying them whole.
func TestLongAnswerStored(t *testing.T) {
	srv, m, bucket := setup(t)
	text := strings.Repeat("long answer ", 3<<20/12)
	args := `{"command":"` + strings.Repeat("e", 10<<10) + `"}`
	srv.Script(fakemodel.Reply{Text: text, Piece: 16 << 10, ToolCalls: []fakemodel.ToolCall{
		{ID: "s", Name: "shell", Arguments: `{"command":"ls"}`}, {ID: "l", Name: "shell", Arguments: args}}})
	stream := transfer.Outputs + "agent/long/turn-1-step-1"
	resp, err := complete(t, m, chat.Request{Conversation: "long", Stream: stream,
		New: []chat.Message{{Role: chat.RoleUser, Content: "say a lot"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Message.Content) > chat.MaxInlineText || !strings.HasPrefix(text, resp.Message.Content) {
		t.Errorf("the result carries %d bytes of text, want its start, at most %d", len(resp.Message.Content), chat.MaxInlineText)
	}
	if resp.Text == nil || resp.Text.Size != int64(len(text)) {
		t.Fatalf("stored text %+v, want %d bytes", resp.Text, len(text))
	}
	whole, err := transfer.ReadAt(t.Context(), bucket, resp.Text.Key, 0, 0, 2*len(text))
	if err != nil || string(whole) != text {
		t.Errorf("stored text: %d bytes (%v), want the %d of the answer", len(whole), err, len(text))
	}
	conv, err := chat.Load(t.Context(), bucket, resp.Conversation)
	if err != nil || len(conv) != 2 || conv[1].Content != text {
		t.Errorf("the stored conversation does not hold the whole answer (%v)", err)
	}
	if len(resp.Message.ToolCalls) != 2 || resp.Message.ToolCalls[1].Arguments != args {
		t.Fatalf("tool calls %d, want 2, the second's arguments whole", len(resp.Message.ToolCalls))
	}
	if len(resp.Arguments) != 2 || resp.Arguments[0].Key != "" || resp.Arguments[1].Size != int64(len(args)) {
		t.Fatalf("stored arguments %+v: want the second call's only", resp.Arguments)
	}
	stored, err := transfer.ReadAt(t.Context(), bucket, resp.Arguments[1].Key, 0, 0, 1<<20)
	if err != nil || string(stored) != args {
		t.Errorf("stored arguments: %d bytes (%v), want %d", len(stored), err, len(args))
	}
}

func TestBoundsConfig(t *testing.T) {
	for _, cfg := range []model.Config{{MaxArguments: chat.MaxCallBytes + 1}, {MaxToolCalls: chat.MaxToolCalls + 1}, {MaxText: -1}} {
		cfg.BaseURL, cfg.Model = "http://127.0.0.1:1/v1", "m"
		if _, err := model.New(cfg, nil); err == nil || strings.Contains(err.Error(), "blob store") {
			t.Errorf("config %+v: %v, want refused", cfg, err)
		}
	}
}
