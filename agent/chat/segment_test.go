package chat

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"gocloud.dev/blob/memblob"
)

func TestSegments(t *testing.T) {
	ctx := t.Context()
	b := memblob.OpenBucket(nil)
	defer b.Close()
	first := []Message{{Role: RoleSystem, Content: "be brief"}, {Role: RoleUser, Content: "hi"}}
	second := []Message{{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "shell", Arguments: `{"command":"ls"}`}}},
		{Role: RoleTool, ToolCallID: "c1", Content: "go.mod\n"}}

	segs, err := Append(ctx, b, "s1", nil, nil, first)
	if err != nil {
		t.Fatal(err)
	}
	again, err := SaveSegment(ctx, b, "s1", first)
	if err != nil || again != segs[0] {
		t.Errorf("saving the same messages again: %+v %v, want %+v", again, err, segs[0])
	}
	segs, err = Append(ctx, b, "s1", segs, first, second)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(ctx, b, segs)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(append([]Message(nil), first...), second...); !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %+v, want %+v", got, want)
	}

	t.Run("altered", func(t *testing.T) {
		if err := b.WriteAll(ctx, segs[1].Key, []byte(`{"messages":[]}`), nil); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = SaveSegment(ctx, b, "s1", second) }()
		if _, err := Load(ctx, b, segs); !errors.Is(err, ErrBadSegment) {
			t.Errorf("altered segment: %v, want ErrBadSegment", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		bad := []Segment{{Key: SegmentPrefix + "s1/none", SHA256: segs[0].SHA256}}
		if _, err := Load(ctx, b, bad); !errors.Is(err, ErrBadSegment) {
			t.Errorf("missing segment: %v, want ErrBadSegment", err)
		}
	})
	t.Run("bad name", func(t *testing.T) {
		if _, err := SaveSegment(ctx, b, "../x", first); err == nil {
			t.Error("a conversation name with a slash was accepted")
		}
	})
}

// Past MaxSegments a conversation is merged into one segment, holding
// every message in order.
func TestAppendMerges(t *testing.T) {
	ctx := t.Context()
	b := memblob.OpenBucket(nil)
	defer b.Close()
	var segs []Segment
	var all []Message
	for i := range MaxSegments + 1 {
		msg := []Message{{Role: RoleUser, Content: fmt.Sprint("message ", i)}}
		var err error
		if segs, err = Append(ctx, b, "s", segs, all, msg); err != nil {
			t.Fatal(err)
		}
		all = append(all, msg...)
	}
	if len(segs) != 1 || segs[0].Messages != MaxSegments+1 {
		t.Fatalf("after %d appends: %+v, want one merged segment", MaxSegments+1, segs)
	}
	got, err := Load(ctx, b, segs)
	if err != nil || !reflect.DeepEqual(got, all) {
		t.Errorf("merged conversation %v (%v), want %v", got, err, all)
	}
}

func TestUsageAdd(t *testing.T) {
	u := Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}
	u.Add(Usage{PromptTokens: 10, CompletionTokens: 20, TotalTokens: 30})
	if u != (Usage{PromptTokens: 11, CompletionTokens: 22, TotalTokens: 33}) {
		t.Errorf("sum %+v", u)
	}
}
