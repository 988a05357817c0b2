package activities

import (
	"context"
	"io"
	"sync"

	"github.com/berth-dev/berth/transfer"
)

// capture receives one output stream of a command: it keeps the first
// inlineCap bytes in memory, and once the stream outgrows them, stores
// it in parts, up to a cap: past it, only the stream's last bytes are
// kept, and stored at its end.
type capture struct {
	mu        sync.Mutex
	a         *Activities
	ctx       context.Context
	key       string
	inlineCap int
	inline    []byte
	total     int64 // bytes received, counting those of earlier attempts
	stored    int64 // bytes written to parts
	headCap   int64 // bytes stored before only the tail is kept
	tail      []byte
	tailCap   int
	parts     *transfer.PartWriter
	resumed   bool
	resumedAt int64 // bytes an earlier attempt stored
}

// newCapture starts a capture, after the parts an earlier attempt stored;
// maxOutput caps what is stored (zero: transfer.DefaultMaxOutput).
func newCapture(ctx context.Context, a *Activities, key string, storedParts int, maxOutput int64) *capture {
	if maxOutput <= 0 {
		maxOutput = transfer.DefaultMaxOutput
	}
	c := &capture{a: a, ctx: ctx, key: key, inlineCap: a.inlineCap()}
	c.tailCap = int(min(transfer.OutputTail, maxOutput/2))
	c.headCap = maxOutput - int64(c.tailCap)
	c.parts = transfer.NewPartWriter(ctx, a.Outputs, key, a.partSize(), storedParts)
	c.total = int64(storedParts) * int64(a.partSize())
	c.stored = c.total
	c.resumedAt = c.total
	c.resumed = storedParts > 0
	return c
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if !c.resumed {
		if k := min(len(p), c.inlineCap+1-len(c.inline)); k > 0 {
			c.inline = append(c.inline, p[:k]...)
		}
	}
	c.total += int64(len(p))
	if room := c.headCap - c.stored; room > 0 {
		k := int(min(room, int64(len(p))))
		if _, err := c.parts.Write(p[:k]); err != nil {
			return 0, err
		}
		c.stored += int64(k)
		p = p[k:]
	}
	if len(p) > 0 {
		// Past the cap: keep the last tailCap bytes only.
		c.tail = append(c.tail, p...)
		if over := len(c.tail) - c.tailCap; over > 0 {
			c.tail = append(c.tail[:0], c.tail[over:]...)
		}
	}
	return n, nil
}

// progress is what a heartbeat records of a stream: the parts stored,
// from which a retry resumes.
func (c *capture) progress() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parts.Parts()
}

// committed is the offset a retry resumes the stream from.
func (c *capture) committed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.parts.Parts()) * int64(c.parts.PartSize())
}

// flushLive stores the stream's unfinished part for live readers.
func (c *capture) flushLive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.parts.FlushPartial() // a reader following live can wait for the next
}

// finish ends the stream and describes it.
func (c *capture) finish(incomplete bool) (transfer.Output, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resumed && c.total <= int64(c.inlineCap) {
		c.parts.DropPartial()
		return transfer.Output{Inline: c.inline, HeadLen: len(c.inline), Size: c.total, Incomplete: incomplete}, nil
	}
	if len(c.tail) > 0 {
		if _, err := c.parts.Write(c.tail); err != nil {
			return transfer.Output{}, err
		}
		c.stored += int64(len(c.tail))
		c.tail = nil
	}
	if err := c.parts.Close(); err != nil {
		return transfer.Output{}, err
	}
	c.a.metrics().BlobWritten(BlobOutput, c.stored-c.resumedAt)
	out := transfer.Output{Size: c.total, Truncated: true, Blob: c.key, Parts: c.parts.Parts(), Incomplete: incomplete,
		Dropped: c.total - c.stored}
	if out.Dropped > 0 {
		out.Incomplete = true
	}
	half := int64(c.inlineCap / 2)
	head, err := c.readRange(0, half)
	if err != nil {
		return transfer.Output{}, err
	}
	tail, err := c.readRange(max(c.stored-half, half), half)
	if err != nil {
		return transfer.Output{}, err
	}
	out.Inline = append(head, tail...)
	out.HeadLen = len(head)
	return out, nil
}

// readRange reads n bytes from offset off of the stored parts.
func (c *capture) readRange(off, n int64) ([]byte, error) {
	var out []byte
	size := int64(c.parts.PartSize())
	for n > 0 && off < c.stored {
		i := int(off / size)
		if i >= c.parts.Parts() {
			break
		}
		within := off % size
		k := min(n, size-within)
		r, err := c.a.Outputs.NewRangeReader(c.ctx, transfer.PartKey(c.key, i), within, k, nil)
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			break
		}
		out = append(out, b...)
		off += int64(len(b))
		n -= int64(len(b))
	}
	return out, nil
}
