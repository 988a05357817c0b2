package model

import (
	"container/list"
	"context"
	"sync"

	"gocloud.dev/blob"

	"github.com/berth-dev/berth/agent/chat"
)

// segmentCacheBytes bounds the messages a Model keeps of the segments
// it has read.
const segmentCacheBytes = 32 << 20

// segmentCache keeps the messages of segments read and checked
// against their hash. Every step of a turn sends the whole
// conversation, so without it each step would read and check every
// segment again; a segment never changes under its key (the key ends
// with its hash), so a copy checked once stays good. Only segments
// read are kept, not those written: a segment altered in the store
// before its first read is still refused.
type segmentCache struct {
	mu    sync.Mutex
	max   int
	size  int
	order *list.List // of *cachedSegment, most recently used first
	byKey map[string]*list.Element
}

type cachedSegment struct {
	seg  chat.Segment
	msgs []chat.Message
	size int
}

func newSegmentCache(max int) *segmentCache {
	return &segmentCache{max: max, order: list.New(), byKey: map[string]*list.Element{}}
}

// load is chat.Load, from the cache where it can. The messages
// returned are shared with the cache: callers copy before changing
// them.
func (c *segmentCache) load(ctx context.Context, b *blob.Bucket, segs []chat.Segment) ([]chat.Message, error) {
	var msgs []chat.Message
	for _, seg := range segs {
		if m, ok := c.get(seg); ok {
			msgs = append(msgs, m...)
			continue
		}
		m, err := chat.Load(ctx, b, []chat.Segment{seg})
		if err != nil {
			return nil, err
		}
		c.put(seg, m)
		msgs = append(msgs, m...)
	}
	return msgs, nil
}

func (c *segmentCache) get(seg chat.Segment) ([]chat.Message, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[seg.Key]
	if !ok {
		return nil, false
	}
	cs := e.Value.(*cachedSegment)
	if cs.seg != seg {
		return nil, false // the same key with another hash or count: read it
	}
	c.order.MoveToFront(e)
	return cs.msgs, true
}

func (c *segmentCache) put(seg chat.Segment, msgs []chat.Message) {
	size := len(seg.Key) + 64
	for _, m := range msgs {
		size += len(m.Content) + len(m.ToolCallID) + 32
		for _, tc := range m.ToolCalls {
			size += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 48
		}
	}
	if size > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[seg.Key]; ok {
		c.size -= e.Value.(*cachedSegment).size
		c.order.Remove(e)
	}
	c.byKey[seg.Key] = c.order.PushFront(&cachedSegment{seg: seg, msgs: msgs, size: size})
	c.size += size
	for c.size > c.max {
		e := c.order.Back()
		cs := e.Value.(*cachedSegment)
		c.order.Remove(e)
		delete(c.byKey, cs.seg.Key)
		c.size -= cs.size
	}
}
