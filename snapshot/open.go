package snapshot

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/internal/sparsetar"
)

// Restores read chunks ahead of the tar writer, fetchers at a time and
// up to fetchAhead chunks ahead, and keep the cacheSize chunks used last,
// so that small files sharing a pack do not fetch it again. With chunks
// of up to 4 MiB, a restore holds about 50 MiB.
const (
	fetchers   = 8
	fetchAhead = 8
	cacheSize  = 4
)

// errClosed is why a restore stops when its reader is closed early.
var errClosed = errors.New("snapshot: stream closed")

// Open returns the snapshot as a tar stream that provider.Sandbox.Import
// accepts: PAX format, relative names, directories ("name/"), regular
// files, symbolic links, and hard links to an earlier file of the stream;
// permission bits and mtimes to the nanosecond, no owners. A missing
// snapshot is an error wrapping ErrNotFound. Chunks are checked as they
// are read: a bad one makes Read fail with an error wrapping ErrCorrupt.
// Closing the stream early stops the reading.
//
// Progress, if not nil, is called from a goroutine of the stream's every
// half second and once at the end.
func (s *Store) Open(ctx context.Context, id string, progress func(Progress)) (io.ReadCloser, error) {
	// The whole manifest is read and checked first, so that a bad one
	// fails here, before the caller starts unpacking.
	m, err := s.loadManifest(ctx, id)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	pr, pw := io.Pipe()
	rs := &restore{store: s, m: m}
	done := make(chan struct{})
	go func() {
		defer close(done)
		stop := reportEvery(progress, rs.progress)
		err := rs.write(ctx, pw)
		stop()
		pw.CloseWithError(err)
	}()
	return &tarStream{pr: pr, cancel: cancel, done: done}, nil
}

type tarStream struct {
	pr     *io.PipeReader
	cancel context.CancelCauseFunc
	done   chan struct{}
}

func (t *tarStream) Read(p []byte) (int, error) { return t.pr.Read(p) }

// Close stops the restore and returns when it has stopped.
func (t *tarStream) Close() error {
	t.cancel(errClosed)
	t.pr.Close()
	<-t.done
	return nil
}

// restore writes one snapshot as a tar stream.
type restore struct {
	store *Store
	m     *manifest

	files, bytes, transferred atomic.Int64
}

func (rs *restore) progress() Progress {
	return Progress{Files: rs.files.Load(), Bytes: rs.bytes.Load(), Transferred: rs.transferred.Load()}
}

func (rs *restore) write(ctx context.Context, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	next, wait := rs.prefetch(ctx, rs.plan())
	defer wait()
	defer cancel()

	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	cache := &lru{}
	defer cache.drain(rs.store)
	for _, e := range rs.m.entries {
		// Chunks fetched ahead may hold the rest of the stream: look at
		// ctx here too, so that cancelling always stops it.
		if ctx.Err() != nil {
			return rs.writeErr(ctx, ctx.Err())
		}
		hdr := &tar.Header{Name: e.Path, Mode: e.Mode, ModTime: time.Unix(0, e.MTime), Format: tar.FormatPAX}
		switch e.Type {
		case typeDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, e.Path+"/"
		case typeFile:
			hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
		case typeSymlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
		case typeHardlink:
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, e.Target
		}
		// A file with holes travels as a sparse entry: its data only.
		var out io.Writer = tw
		var sparse *sparsetar.DataWriter
		ext, ok := extents(e)
		if ok {
			dw, err := sparsetar.WriteHeader(tw, bw, hdr, ext)
			if err != nil {
				return rs.writeErr(ctx, err)
			}
			out, sparse = dw, dw
		} else if err := tw.WriteHeader(hdr); err != nil {
			return rs.writeErr(ctx, err)
		}
		var pos int64
		for _, r := range e.Chunks {
			pos += r.Len
			if r.hole() {
				// A hole is skipped, unless it is one of the small ones
				// merged into the data to keep under MaxExtents, or the
				// file has no holes left as holes.
				if sparse == nil || inData(ext, pos-r.Len) {
					if _, err := io.CopyN(out, zeroReader{}, r.Len); err != nil {
						return rs.writeErr(ctx, err)
					}
				}
				rs.bytes.Add(r.Len)
				continue
			}
			data, ok := cache.get(r.Hash)
			if !ok {
				buf, err := next(r.Hash)
				if err != nil {
					return err
				}
				cache.put(rs.store, r.Hash, buf)
				data = *buf
			}
			if r.Off+r.Len > int64(len(data)) {
				return fmt.Errorf("%w: snapshot %s: %q: reference past the end of chunk %s", ErrCorrupt, rs.m.ID, e.Path, r.Hash)
			}
			if _, err := out.Write(data[r.Off : r.Off+r.Len]); err != nil {
				return rs.writeErr(ctx, err)
			}
			rs.bytes.Add(r.Len)
		}
		if sparse != nil {
			if err := sparse.Close(); err != nil {
				return rs.writeErr(ctx, err)
			}
		}
		if e.Type == typeFile {
			rs.files.Add(1)
		}
	}
	if err := tw.Close(); err != nil {
		return rs.writeErr(ctx, err)
	}
	return rs.writeErr(ctx, bw.Flush())
}

// extents lists where a file with holes has data, and reports whether
// it has holes. A file with more runs of data than a sparse entry
// carries has the smallest holes between them merged into the data.
func extents(e *entry) ([]sparsetar.Extent, bool) {
	var ext []sparsetar.Extent
	holes := false
	var off int64
	for _, r := range e.Chunks {
		switch {
		case r.hole():
			holes = true
		case len(ext) > 0 && ext[len(ext)-1].Off+ext[len(ext)-1].Len == off:
			ext[len(ext)-1].Len += r.Len
		default:
			ext = append(ext, sparsetar.Extent{Off: off, Len: r.Len})
		}
		off += r.Len
	}
	if len(ext) > sparsetar.MaxExtents {
		ext = sparsetar.Coalesce(ext, sparsetar.MaxExtents)
	}
	return ext, holes
}

// inData reports whether offset off is inside one of the extents.
func inData(ext []sparsetar.Extent, off int64) bool {
	i := sort.Search(len(ext), func(i int) bool { return ext[i].Off > off })
	return i > 0 && off < ext[i-1].Off+ext[i-1].Len
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (rs *restore) writeErr(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("snapshot: restore: %w", context.Cause(ctx))
	}
	return fmt.Errorf("snapshot: restore %s: %w", rs.m.ID, err)
}

// plan lists the chunks to fetch, in the order the writer will need
// them, leaving out those it will find in its cache: it runs the same
// cache over the same references.
func (rs *restore) plan() []hash {
	var plan []hash
	cache := &lru{}
	for _, e := range rs.m.entries {
		for _, r := range e.Chunks {
			if r.hole() {
				continue
			}
			if _, ok := cache.get(r.Hash); !ok {
				cache.put(nil, r.Hash, nil)
				plan = append(plan, r.Hash)
			}
		}
	}
	return plan
}

// prefetch fetches the chunks of plan in the background. next returns
// them in order (it is told which hash it expects, as a check); wait
// returns once every fetch has ended, after ctx is cancelled.
func (rs *restore) prefetch(ctx context.Context, plan []hash) (next func(hash) (*[]byte, error), wait func()) {
	type result struct {
		buf *[]byte
		err error
	}
	futures := make(chan chan result, fetchAhead)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(futures)
		sem := make(chan struct{}, fetchers)
		for _, h := range plan {
			ch := make(chan result, 1)
			select {
			case futures <- ch:
			case <-ctx.Done():
				return
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				ch <- result{err: context.Cause(ctx)}
				return
			}
			wg.Go(func() {
				defer func() { <-sem }()
				buf := rs.store.getBuf()
				data, n, err := rs.store.getChunk(ctx, h, *buf)
				if err != nil {
					rs.store.putBuf(buf)
					ch <- result{err: err}
					return
				}
				*buf = data
				rs.transferred.Add(n)
				ch <- result{buf: buf}
			})
		}
	})
	i := 0
	next = func(h hash) (*[]byte, error) {
		if i >= len(plan) || plan[i] != h {
			return nil, fmt.Errorf("snapshot: restore: chunk %s needed out of plan", h) // a bug, not bad data
		}
		i++
		select {
		case ch := <-futures:
			select {
			case r := <-ch:
				if r.err != nil {
					return nil, fmt.Errorf("snapshot %s: %w", rs.m.ID, readErr(ctx, r.err))
				}
				return r.buf, nil
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
		return nil, fmt.Errorf("snapshot: restore: %w", context.Cause(ctx))
	}
	wait = func() {
		wg.Wait()
		// Free what was fetched and never used.
		for ch := range futures {
			select {
			case r := <-ch:
				if r.buf != nil {
					rs.store.putBuf(r.buf)
				}
			default:
			}
		}
	}
	return next, wait
}

// lru holds the last chunks used, most recent first.
type lru struct {
	items []lruItem
}

type lruItem struct {
	hash hash
	buf  *[]byte
}

func (c *lru) get(h hash) ([]byte, bool) {
	for i, it := range c.items {
		if it.hash == h {
			copy(c.items[1:i+1], c.items[:i])
			c.items[0] = it
			if it.buf == nil {
				return nil, true
			}
			return *it.buf, true
		}
	}
	return nil, false
}

// put adds a chunk, evicting the oldest into s's buffer pool (s is nil
// when planning, with no buffers).
func (c *lru) put(s *Store, h hash, buf *[]byte) {
	if len(c.items) == cacheSize {
		if old := c.items[cacheSize-1].buf; old != nil && s != nil {
			s.putBuf(old)
		}
		c.items = c.items[:cacheSize-1]
	}
	c.items = append(c.items, lruItem{})
	copy(c.items[1:], c.items)
	c.items[0] = lruItem{hash: h, buf: buf}
}

func (c *lru) drain(s *Store) {
	for _, it := range c.items {
		if it.buf != nil {
			s.putBuf(it.buf)
		}
	}
	c.items = nil
}
