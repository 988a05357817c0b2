package transfer

import (
	"context"
	"fmt"
	"io"
	"sync"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// PartWriter stores a stream as parts of a fixed size, so that what was
// stored survives the writer: a retry starts at the next part.
type PartWriter struct {
	ctx     context.Context
	bucket  *blob.Bucket
	key     string
	size    int
	buf     []byte
	parts   int // stored so far, or being stored (async)
	partial int // bytes of the current part in its partial object

	// Async stores (SetAsync): up to cap(slots) parts at once.
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	err   error // the first failed store of a part
}

// SetAsync lets w store up to n complete parts at once, each in the
// background while the stream goes on: a store's round trip per part (an
// S3 PUT) is mostly waiting. It holds up to n parts in memory besides the
// one being filled. Parts, FlushPartial and Close wait for the parts
// under way, so that what they report is stored; a failed part fails the
// Write after it, or Close. n of 1 or less stores each part in Write.
func (w *PartWriter) SetAsync(n int) {
	if n > 1 {
		w.slots = make(chan struct{}, n)
	}
}

// DefaultAsyncParts is how many parts a writer of a large stream that no
// reader follows live (an export) stores at once.
const DefaultAsyncParts = 4

// NewPartWriter writes the stream key in parts of size bytes, starting
// at part parts (those before are stored already).
func NewPartWriter(ctx context.Context, bucket *blob.Bucket, key string, size, parts int) *PartWriter {
	return &PartWriter{ctx: ctx, bucket: bucket, key: key, size: size, parts: parts}
}

// Parts is the number of parts stored so far.
func (w *PartWriter) Parts() int {
	w.wait()
	return w.parts
}

// wait waits for the parts being stored, and says whether one failed.
func (w *PartWriter) wait() error {
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// PartSize is the size of the parts.
func (w *PartWriter) PartSize() int { return w.size }

func (w *PartWriter) Write(p []byte) (int, error) {
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

func (w *PartWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if w.slots != nil {
		return w.flushAsync()
	}
	if err := WriteObject(w.ctx, w.bucket, PartKey(w.key, w.parts), w.buf); err != nil {
		return fmt.Errorf("store part %d of %s: %w", w.parts, w.key, err)
	}
	if w.partial > 0 {
		_ = w.bucket.Delete(w.ctx, PartialKey(w.key, w.parts))
		w.partial = 0
	}
	w.parts++
	w.buf = w.buf[:0]
	return nil
}

// flushAsync stores the full part in the background, once a slot is
// free; the writer goes on with a new buffer.
func (w *PartWriter) flushAsync() error {
	select {
	case w.slots <- struct{}{}:
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		<-w.slots
		return err
	}
	buf, part, partial := w.buf, w.parts, w.partial
	w.buf, w.partial = nil, 0
	w.parts++
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.slots }()
		err := WriteObject(w.ctx, w.bucket, PartKey(w.key, part), buf)
		if err == nil && partial > 0 {
			_ = w.bucket.Delete(w.ctx, PartialKey(w.key, part))
		}
		if err != nil {
			w.mu.Lock()
			if w.err == nil {
				w.err = fmt.Errorf("store part %d of %s: %w", part, w.key, err)
			}
			w.mu.Unlock()
		}
	}()
	return nil
}

// FlushPartial stores what there is of the current part, for readers
// that follow the stream live, when it grew since the last time.
func (w *PartWriter) FlushPartial() error {
	if len(w.buf) == w.partial {
		return nil
	}
	if err := w.wait(); err != nil {
		return err
	}
	if err := WriteObject(w.ctx, w.bucket, PartialKey(w.key, w.parts), w.buf); err != nil {
		return err
	}
	w.partial = len(w.buf)
	return nil
}

// DropPartial removes the current part's partial object.
func (w *PartWriter) DropPartial() {
	if w.partial > 0 {
		_ = w.bucket.Delete(w.ctx, PartialKey(w.key, w.parts))
		w.partial = 0
	}
}

// Abort waits for the parts under way, and stores nothing more: for a
// stream given up on, whose writer's retry stores it again.
func (w *PartWriter) Abort() {
	_ = w.wait()
	w.buf = nil
}

// Close stores the last, partial part, and waits for the parts under way.
func (w *PartWriter) Close() error {
	err := w.flush()
	if werr := w.wait(); err == nil {
		err = werr
	}
	return err
}

// ReadAt reads at most max bytes of the stream key from offset off:
// from complete parts, and from the partial object of the part under
// way. It returns nothing, and no error, where nothing is stored yet.
func ReadAt(ctx context.Context, bucket *blob.Bucket, key string, partSize int, off int64, max int) ([]byte, error) {
	size := int64(partSize)
	if size <= 0 {
		size = DefaultPartSize
	}
	var out []byte
	for len(out) < max {
		i, within := int(off/size), off%size
		b, full, err := readPart(ctx, bucket, key, i, within, int64(max-len(out)))
		if err != nil {
			return out, err
		}
		out = append(out, b...)
		off += int64(len(b))
		// A whole part read to its end: the next may be there too.
		if !full || off%size != 0 || len(b) == 0 {
			break
		}
	}
	return out, nil
}

// readPart reads at most n bytes of part i from offset within: from the
// part when it is complete (full), from its partial object otherwise.
func readPart(ctx context.Context, bucket *blob.Bucket, key string, i int, within, n int64) (b []byte, full bool, err error) {
	for _, k := range []struct {
		key  string
		full bool
	}{{PartKey(key, i), true}, {PartialKey(key, i), false}} {
		r, err := bucket.NewRangeReader(ctx, k.key, within, n, nil)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue // not there, or a partial object removed as its part completed
		}
		if err != nil {
			return nil, false, err
		}
		b, err := io.ReadAll(r)
		r.Close()
		return b, k.full, err
	}
	return nil, false, nil
}

// WriteObject stores p under key, as a part is stored. Bucket.WriteAll would hash p with MD5
// twice on the way, a sixth of the relay's CPU: parts are checked by
// their readers (sizes, and tar or the snapshot's own hashes), not by
// the store.
func WriteObject(ctx context.Context, bucket *blob.Bucket, key string, p []byte) error {
	w, err := bucket.NewWriter(ctx, key, &blob.WriterOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return err
	}
	if _, err := w.Write(p); err != nil {
		_ = w.Close()
		return err
	}
	return w.Close()
}

// DeleteParts removes the parts of a stream, and their partial objects.
// Parts already gone are no error.
func DeleteParts(ctx context.Context, bucket *blob.Bucket, key string, parts int) error {
	for i := 0; i <= parts; i++ {
		for _, k := range []string{PartKey(key, i), PartialKey(key, i)} {
			if err := bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return fmt.Errorf("transfer: delete %s: %w", k, err)
			}
		}
	}
	return nil
}
