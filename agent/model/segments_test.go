package model

import (
	"fmt"
	"strings"
	"testing"

	"gocloud.dev/blob/memblob"

	"github.com/berth-dev/berth/agent/chat"
)

// A segment read once is served from memory afterwards; the least
// recently used go past the cache's size; a segment changed under its
// key is read again.
func TestSegmentCache(t *testing.T) {
	ctx := t.Context()
	b := memblob.OpenBucket(nil)
	defer b.Close()
	var segs []chat.Segment
	for i := range 3 {
		seg, err := chat.SaveSegment(ctx, b, "c", []chat.Message{{Role: chat.RoleUser, Content: fmt.Sprint(i, strings.Repeat("x", 1000))}})
		if err != nil {
			t.Fatal(err)
		}
		segs = append(segs, seg)
	}
	c := newSegmentCache(2500) // room for two segments
	if msgs, err := c.load(ctx, b, segs[:2]); err != nil || len(msgs) != 2 {
		t.Fatalf("first load: %d messages, %v", len(msgs), err)
	}
	// Gone from the store, still in memory.
	for _, seg := range segs[:2] {
		if err := b.Delete(ctx, seg.Key); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := c.load(ctx, b, segs[:2])
	if err != nil || len(msgs) != 2 || !strings.HasPrefix(msgs[1].Content, "1x") {
		t.Fatalf("cached load: %+v, %v", msgs, err)
	}
	// The third pushes the first out.
	if _, err := c.load(ctx, b, segs[2:]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.load(ctx, b, segs[:1]); err == nil {
		t.Error("the least recently used segment was kept past the cache's size")
	}
	if _, err := c.load(ctx, b, segs[1:]); err != nil {
		t.Errorf("the two most recently used segments: %v", err)
	}
	// Another hash under a cached key is not served from memory.
	other := segs[1]
	other.SHA256 = strings.Repeat("0", 64)
	if _, err := c.load(ctx, b, []chat.Segment{other}); err == nil {
		t.Error("a segment with another hash was served from memory")
	}
}
