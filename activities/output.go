package activities

import (
	"context"
	"io"
	"sync"

	"gocloud.dev/blob"

	"github.com/berth-dev/berth/transfer"
)

// Output is a stream of bytes as a result carries it; see transfer.Output.
type Output = transfer.Output

// Open reads the whole of an output, from the blob store when needed.
func Open(ctx context.Context, bucket *blob.Bucket, o Output) (io.ReadCloser, error) {
	return transfer.Open(ctx, bucket, o)
}

// OutputKey is where the output stream ("stdout" or "stderr") of command
// execID in sandbox sandboxID is stored.
func OutputKey(sandboxID, execID, stream string) string {
	return transfer.OutputKey(sandboxID, execID, stream)
}

// capture receives one output stream of a command: it keeps the first
// inlineCap bytes in memory, and once the stream outgrows them, stores
// the whole in parts.
type capture struct {
	mu        sync.Mutex
	a         *Activities
	ctx       context.Context
	key       string
	inlineCap int
	inline    []byte
	total     int64 // bytes received, counting those of earlier attempts
	parts     *transfer.PartWriter
	resumed   bool
}

// newCapture starts a capture, after the parts an earlier attempt stored.
func newCapture(ctx context.Context, a *Activities, key string, storedParts int) *capture {
	c := &capture{a: a, ctx: ctx, key: key, inlineCap: a.inlineCap()}
	c.parts = transfer.NewPartWriter(ctx, a.Outputs, key, a.partSize(), storedParts)
	c.total = int64(storedParts) * int64(a.partSize())
	c.resumed = storedParts > 0
	return c
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resumed {
		if k := min(len(p), c.inlineCap+1-len(c.inline)); k > 0 {
			c.inline = append(c.inline, p[:k]...)
		}
	}
	c.total += int64(len(p))
	if _, err := c.parts.Write(p); err != nil {
		return 0, err
	}
	return len(p), nil
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
func (c *capture) finish(incomplete bool) (Output, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resumed && c.total <= int64(c.inlineCap) {
		c.parts.DropPartial()
		return Output{Inline: c.inline, HeadLen: len(c.inline), Size: c.total, Incomplete: incomplete}, nil
	}
	if err := c.parts.Close(); err != nil {
		return Output{}, err
	}
	out := Output{Size: c.total, Truncated: true, Blob: c.key, Parts: c.parts.Parts(), Incomplete: incomplete}
	half := int64(c.inlineCap / 2)
	head, err := c.readRange(0, half)
	if err != nil {
		return Output{}, err
	}
	tail, err := c.readRange(max(c.total-half, half), half)
	if err != nil {
		return Output{}, err
	}
	out.Inline = append(head, tail...)
	out.HeadLen = len(head)
	return out, nil
}

// readRange reads n bytes from offset off of the stored parts.
func (c *capture) readRange(off, n int64) ([]byte, error) {
	var out []byte
	size := int64(c.parts.PartSize())
	for n > 0 && off < c.total {
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
