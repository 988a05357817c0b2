package activities

import (
	"context"
	"io"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// Follower reads an output while its command runs, from what the Exec
// activity stores of it: whole parts, and the partial object of the part
// being written. It never holds more than what one call returns.
type Follower struct {
	Bucket   *blob.Bucket
	Key      string // see OutputKey
	PartSize int    // zero means DefaultPartSize
	off      int64
}

// Offset is how many bytes Next has returned so far.
func (f *Follower) Offset() int64 { return f.off }

// Next returns what is stored beyond what it returned before: nothing
// when the command has written nothing new. With an error it may still
// return bytes, which count as read: write them.
func (f *Follower) Next(ctx context.Context) ([]byte, error) {
	size := int64(f.PartSize)
	if size <= 0 {
		size = DefaultPartSize
	}
	var out []byte
	for {
		i, within := int(f.off/size), f.off%size
		b, full, err := f.read(ctx, i, within)
		if err != nil {
			return out, err
		}
		out = append(out, b...)
		f.off += int64(len(b))
		// A whole part read to its end: the next may be there too.
		if !full || f.off%size != 0 || len(b) == 0 {
			return out, nil
		}
	}
}

// read reads part i from offset within: from the part when it is
// complete (full), from its partial object otherwise.
func (f *Follower) read(ctx context.Context, i int, within int64) (b []byte, full bool, err error) {
	for _, k := range []struct {
		key  string
		full bool
	}{{PartKey(f.Key, i), true}, {PartialKey(f.Key, i), false}} {
		attrs, err := f.Bucket.Attributes(ctx, k.key)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if within >= attrs.Size {
			return nil, k.full, nil
		}
		r, err := f.Bucket.NewRangeReader(ctx, k.key, within, -1, nil)
		if gcerrors.Code(err) == gcerrors.NotFound {
			continue // a partial object removed as its part completed
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
