package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"
)

// GCOptions says what GC may remove.
type GCOptions struct {
	// DropCheckpoint, if not nil, is asked about every checkpoint
	// snapshot, one at a time; those it returns true for are deleted
	// before the sweep, and their chunks with them. User snapshots are
	// only ever removed by Delete.
	DropCheckpoint func(Info) bool
	// DryRun counts what would be removed and removes nothing.
	DryRun bool
}

// GCStats says what a GC found and removed.
type GCStats struct {
	Snapshots int // snapshots kept
	Dropped   int // checkpoints deleted at DropCheckpoint's word
	Chunks    int // chunks in the store before the sweep
	// Young counts unreferenced chunks spared because they were written
	// within the grace period: maybe by a Save under way.
	Young        int
	Deleted      int   // chunks deleted
	DeletedBytes int64 // their compressed size
}

// GC deletes the chunks that no snapshot references and that were last
// written before the grace period: a Save under way has written its new
// chunks since it started, and refreshed the old ones it relies on (see
// putChunk), so it loses none as long as it finishes within half the
// grace period, which it checks.
//
// A manifest that cannot be read stops GC before it deletes anything:
// what it references is unknown. Delete it, or repair the bucket.
func (s *Store) GC(ctx context.Context, opts GCOptions) (GCStats, error) {
	// The cut-off is taken before the manifests are read: a chunk written
	// after it is spared even if its snapshot was saved too late to be
	// seen.
	cutoff := s.now().Add(-s.grace)
	var stats GCStats
	marked, err := s.mark(ctx, opts, &stats)
	if err != nil {
		return stats, err
	}

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	var mu sync.Mutex
	it := s.bucket.List(&blob.ListOptions{Prefix: "chunks/"})
	for {
		obj, err := it.Next(gctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			if werr := g.Wait(); werr != nil {
				return stats, werr // why the listing stopped
			}
			return stats, fmt.Errorf("snapshot: gc: list chunks: %w", err)
		}
		h, ok := chunkFromKey(obj.Key)
		if !ok {
			continue // not ours
		}
		stats.Chunks++
		if _, ok := marked[h]; ok {
			continue
		}
		if !obj.ModTime.Before(cutoff) {
			stats.Young++
			continue
		}
		if opts.DryRun {
			stats.Deleted++
			stats.DeletedBytes += obj.Size
			continue
		}
		g.Go(func() error {
			deleted, err := s.sweep(gctx, obj.Key, cutoff)
			if deleted {
				mu.Lock()
				stats.Deleted++
				stats.DeletedBytes += obj.Size
				mu.Unlock()
			}
			return err
		})
	}
	err = g.Wait()
	return stats, err
}

// sweep deletes one unreferenced chunk, unless it was written again since
// it was listed: a Save may have just refreshed it.
func (s *Store) sweep(ctx context.Context, key string, cutoff time.Time) (bool, error) {
	attrs, err := s.bucket.Attributes(ctx, key)
	if err == nil && attrs.ModTime.Before(cutoff) {
		err = s.bucket.Delete(ctx, key)
		if err == nil {
			return true, nil
		}
	}
	if err == nil || gcerrors.Code(err) == gcerrors.NotFound {
		return false, nil
	}
	return false, fmt.Errorf("snapshot: gc: delete %s: %w", key, err)
}

// mark reads every manifest, dropping the checkpoints opts names, and
// returns the set of chunks the others reference.
func (s *Store) mark(ctx context.Context, opts GCOptions, stats *GCStats) (map[hash]struct{}, error) {
	ids, err := s.ids(ctx)
	if err != nil {
		return nil, err
	}

	marked := make(map[hash]struct{})
	var mu sync.Mutex // guards marked, stats and calls to DropCheckpoint
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, id := range ids {
		g.Go(func() error {
			refs, err := s.markOne(gctx, id, opts, stats, &mu)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			for h := range refs {
				marked[h] = struct{}{}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return marked, nil
}

// markOne returns the chunks one snapshot references, or none when it is
// gone or dropped.
func (s *Store) markOne(ctx context.Context, id string, opts GCOptions, stats *GCStats, mu *sync.Mutex) (map[hash]struct{}, error) {
	mr, closer, err := s.openManifest(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, nil // deleted since it was listed
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: gc: %w", err)
	}
	defer closer()

	mu.Lock()
	drop := opts.DropCheckpoint != nil && mr.hdr.Kind == KindCheckpoint && opts.DropCheckpoint(mr.hdr.info())
	if drop {
		stats.Dropped++
	} else {
		stats.Snapshots++
	}
	mu.Unlock()
	if drop {
		if opts.DryRun {
			return nil, nil
		}
		return nil, s.Delete(ctx, id)
	}

	refs := make(map[hash]struct{})
	for {
		e, err := mr.next()
		if err == io.EOF {
			return refs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot: gc: %w", readErr(ctx, err))
		}
		for _, r := range e.Chunks {
			refs[r.Hash] = struct{}{}
		}
	}
}

// chunkFromKey parses a chunk's key, as chunkKey makes them.
func chunkFromKey(key string) (hash, bool) {
	rest, ok := strings.CutPrefix(key, "chunks/")
	if !ok || len(rest) < 3 || rest[2] != '/' {
		return hash{}, false
	}
	h, err := parseHash(rest[3:])
	if err != nil || rest[:2] != h.String()[:2] {
		return hash{}, false
	}
	return h, true
}
