package snapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// maxCompressedSize bounds a chunk object: zstd adds little to data it
// cannot compress.
const maxCompressedSize = maxChunkSize + maxChunkSize/64 + 4096

// chunkKey spreads chunks over 256 prefixes, which keeps directories
// small on file:// and request rates per prefix low on object stores.
func chunkKey(h hash) string {
	s := h.String()
	return "chunks/" + s[:2] + "/" + s
}

// putChunk stores the compressed bytes of chunk h, unless a copy written
// recently enough is there already, and returns how many bytes it wrote.
//
// An older copy is written again: it may belong only to deleted snapshots,
// and a GC running now may be about to delete it. Writing refreshes its
// modification time, which puts it in the GC's grace period.
func (s *Store) putChunk(ctx context.Context, h hash, compressed []byte) (int64, error) {
	var n int64
	err := s.do(ctx, "write chunk "+h.String(), func(ctx context.Context) (err error) {
		n, err = s.tryPutChunk(ctx, h, compressed)
		return err
	})
	return n, err
}

// tryPutChunk is one attempt of putChunk.
//
// A copy of another size is written again too: a store that lost its
// connection or its process in the middle of a write may have kept
// part of it under the chunk's name (an S3 store does not; a file
// system or a less careful store may), and a snapshot must never refer
// to a chunk that is not whole. Chunks of the same bytes compress to
// the same size with this package's encoder.
func (s *Store) tryPutChunk(ctx context.Context, h hash, compressed []byte) (int64, error) {
	key := chunkKey(h)
	attrs, err := s.bucket.Attributes(ctx, key)
	switch {
	case err == nil && s.now().Sub(attrs.ModTime) < s.grace/2 && attrs.Size == int64(len(compressed)):
		return 0, nil
	case err != nil && gcerrors.Code(err) != gcerrors.NotFound:
		return 0, fmt.Errorf("snapshot: look up chunk %s: %w", h, err)
	}
	// Upload rather than WriteAll, which would hash the data twice more
	// with MD5; chunks carry their own hash.
	opts := &blob.WriterOptions{ContentType: "application/zstd"}
	if err := s.bucket.Upload(ctx, key, bytes.NewReader(compressed), opts); err != nil {
		return 0, fmt.Errorf("snapshot: write chunk %s: %w", h, err)
	}
	return int64(len(compressed)), nil
}

// getChunk reads chunk h into buf, decompressed and verified, and returns
// it with the number of bytes read from the bucket.
func (s *Store) getChunk(ctx context.Context, h hash, buf []byte) ([]byte, int64, error) {
	var data []byte
	var n int64
	err := s.do(ctx, "read chunk "+h.String(), func(ctx context.Context) (err error) {
		data, n, err = s.tryGetChunk(ctx, h, buf)
		return err
	})
	return data, n, err
}

// tryGetChunk is one attempt of getChunk.
func (s *Store) tryGetChunk(ctx context.Context, h hash, buf []byte) ([]byte, int64, error) {
	r, err := s.bucket.NewReader(ctx, chunkKey(h), nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, 0, fmt.Errorf("%w: chunk %s is missing", ErrCorrupt, h)
		}
		return nil, 0, fmt.Errorf("snapshot: read chunk %s: %w", h, err)
	}
	defer r.Close()
	if r.Size() > maxCompressedSize {
		return nil, 0, fmt.Errorf("%w: chunk %s is %d bytes, more than %d", ErrCorrupt, h, r.Size(), maxCompressedSize)
	}
	// Read into a buffer of exactly the object's size: growing one as
	// bytes.Buffer does doubled it, and clearing and copying 4 MiB
	// buffers was a third of a restore's time.
	cbuf := s.getBuf()
	defer s.putBuf(cbuf)
	size := int(r.Size())
	if cap(*cbuf) < size {
		*cbuf = make([]byte, size)
	}
	comp := (*cbuf)[:size]
	if _, err := io.ReadFull(r, comp); err != nil {
		// Short of the size the store gave: the transfer broke, which
		// a retry may mend, not a corrupt chunk.
		return nil, 0, readErr(ctx, fmt.Errorf("snapshot: read chunk %s: %w", h, err))
	}
	data, err := s.dec.DecodeAll(comp, buf[:0])
	if err != nil {
		return nil, 0, fmt.Errorf("%w: chunk %s: %v", ErrCorrupt, h, err)
	}
	if sha256.Sum256(data) != h {
		return nil, 0, fmt.Errorf("%w: chunk %s: contents do not match their hash", ErrCorrupt, h)
	}
	return data, int64(len(comp)), nil
}
