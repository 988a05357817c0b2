package agent

import (
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
