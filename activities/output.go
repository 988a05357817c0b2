package activities

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"

	"gocloud.dev/blob"
)

// Output is a stream of bytes as a result carries it: inline when small,
// otherwise its head and tail inline and the whole in the blob store.
type Output struct {
	// Inline holds the whole stream, or when Truncated its head
	// (Inline[:HeadLen]) followed by its tail.
	Inline  []byte `json:"inline,omitempty"`
	HeadLen int    `json:"head_len"`
	// Size is the length of the whole stream.
	Size      int64 `json:"size"`
	Truncated bool  `json:"truncated,omitempty"`
	// Blob and Parts locate the whole in the blob store; see Open.
	Blob  string `json:"blob,omitempty"`
	Parts int    `json:"parts,omitempty"`
	// Incomplete: bytes produced while no worker was attached, beyond
	// what the sandbox keeps, are missing from the stored whole.
	Incomplete bool `json:"incomplete,omitempty"`
}

// Head is the start of the stream as carried inline.
func (o Output) Head() []byte { return o.Inline[:o.HeadLen] }

// Tail is the end of the stream as carried inline (empty unless
// Truncated).
func (o Output) Tail() []byte { return o.Inline[o.HeadLen:] }

// Open reads the whole of an output, from the blob store when needed.
func Open(ctx context.Context, bucket *blob.Bucket, o Output) (io.ReadCloser, error) {
	if o.Blob == "" {
		return io.NopCloser(bytes.NewReader(o.Inline)), nil
	}
	return &partReader{ctx: ctx, bucket: bucket, key: o.Blob, parts: o.Parts}, nil
}

func partKey(key string, i int) string { return fmt.Sprintf("%s/%06d", key, i) }

// PartialKey names the object holding what a running command has written
// of part i so far. It is rewritten as the part grows, and removed when
// the part is complete; readers that follow a command live read part i
// when it exists, and its partial object otherwise.
func PartialKey(key string, i int) string { return partKey(key, i) + ".partial" }

// PartKey names part i of a stored output.
func PartKey(key string, i int) string { return partKey(key, i) }

// OutputKey is where the output stream ("stdout" or "stderr") of command
// execID in sandbox sandboxID is stored.
func OutputKey(sandboxID, execID, stream string) string {
	return "outputs/" + sandboxID + "/" + execID + "/" + stream
}

// partReader reads the parts of a stored output one after another.
type partReader struct {
	ctx    context.Context
	bucket *blob.Bucket
	key    string
	parts  int
	next   int
	cur    *blob.Reader
}

func (r *partReader) Read(p []byte) (int, error) {
	for {
		if r.cur == nil {
			if r.next == r.parts {
				return 0, io.EOF
			}
			cur, err := r.bucket.NewReader(r.ctx, partKey(r.key, r.next), nil)
			if err != nil {
				return 0, err
			}
			r.cur, r.next = cur, r.next+1
		}
		n, err := r.cur.Read(p)
		if err == io.EOF {
			r.cur.Close()
			r.cur = nil
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
}

func (r *partReader) Close() error {
	if r.cur != nil {
		return r.cur.Close()
	}
	return nil
}

// partWriter stores a stream as parts of a fixed size, so that what was
// stored survives the writer: a retry starts at the next part.
type partWriter struct {
	ctx     context.Context
	bucket  *blob.Bucket
	key     string
	size    int
	buf     []byte
	parts   int // stored so far
	partial int // bytes of the current part in its partial object
}

func newPartWriter(ctx context.Context, bucket *blob.Bucket, key string, size, parts int) *partWriter {
	return &partWriter{ctx: ctx, bucket: bucket, key: key, size: size, parts: parts}
}

func (w *partWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = make([]byte, 0, w.size)
		}
		k := min(len(p), w.size-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == w.size {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *partWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if err := w.bucket.WriteAll(w.ctx, partKey(w.key, w.parts), w.buf, nil); err != nil {
		return fmt.Errorf("store output part %d of %s: %w", w.parts, w.key, err)
	}
	if w.partial > 0 {
		_ = w.bucket.Delete(w.ctx, PartialKey(w.key, w.parts))
		w.partial = 0
	}
	w.parts++
	w.buf = w.buf[:0]
	return nil
}

// flushPartial stores what there is of the current part, for readers
// that follow the command live, when it grew since the last time.
func (w *partWriter) flushPartial() error {
	if len(w.buf) == w.partial {
		return nil
	}
	if err := w.bucket.WriteAll(w.ctx, PartialKey(w.key, w.parts), w.buf, nil); err != nil {
		return err
	}
	w.partial = len(w.buf)
	return nil
}

// dropPartial removes the current part's partial object.
func (w *partWriter) dropPartial() {
	if w.partial > 0 {
		_ = w.bucket.Delete(w.ctx, PartialKey(w.key, w.parts))
		w.partial = 0
	}
}

// Close stores the last, partial part.
func (w *partWriter) Close() error { return w.flush() }

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
	parts     *partWriter
	resumed   bool
}

// newCapture starts a capture, after the parts an earlier attempt stored.
func newCapture(ctx context.Context, a *Activities, key string, storedParts int) *capture {
	c := &capture{a: a, ctx: ctx, key: key, inlineCap: a.inlineCap()}
	c.parts = newPartWriter(ctx, a.Outputs, key, a.partSize(), storedParts)
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
	return c.parts.parts
}

// committed is the offset a retry resumes the stream from.
func (c *capture) committed() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.parts.parts) * int64(c.parts.size)
}

// flushLive stores the stream's unfinished part for live readers.
func (c *capture) flushLive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.parts.flushPartial() // a reader following live can wait for the next
}

// finish ends the stream and describes it.
func (c *capture) finish(incomplete bool) (Output, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.resumed && c.total <= int64(c.inlineCap) {
		c.parts.dropPartial()
		return Output{Inline: c.inline, HeadLen: len(c.inline), Size: c.total, Incomplete: incomplete}, nil
	}
	if err := c.parts.Close(); err != nil {
		return Output{}, err
	}
	out := Output{Size: c.total, Truncated: true, Blob: c.key, Parts: c.parts.parts, Incomplete: incomplete}
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
	size := int64(c.parts.size)
	for n > 0 && off < c.total {
		i := int(off / size)
		if i >= c.parts.parts {
			break
		}
		within := off % size
		k := min(n, size-within)
		r, err := c.a.Outputs.NewRangeReader(c.ctx, partKey(c.key, i), within, k, nil)
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
