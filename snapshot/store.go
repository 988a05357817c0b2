package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/berth-dev/berth/provider"
)

// Store keeps snapshots in a blob bucket. It is safe for concurrent use,
// also by several processes sharing one bucket. To share a bucket with
// other data, give New a blob.PrefixedBucket.
type Store struct {
	bucket      *blob.Bucket
	grace       time.Duration
	clockMargin time.Duration
	now         func() time.Time
	// Bounds on the apparent size of what a Save keeps: see
	// WithMaxFileSize and WithMaxTotalSize.
	maxFileSize, maxTotalSize int64
	// How a failing request is retried: see WithRetry and
	// WithRequestTimeout.
	retry, requestTimeout time.Duration

	// One encoder and decoder for chunks, shared: their EncodeAll and
	// DecodeAll are safe for concurrent use.
	enc *zstd.Encoder
	dec *zstd.Decoder
	// bufs recycles chunk-sized buffers (*[]byte) between saves and
	// restores.
	bufs sync.Pool
}

// Defaults for the options.
const (
	DefaultGracePeriod = time.Hour
	DefaultClockMargin = 2 * time.Second
	// DefaultMaxFileSize is the largest file ext4 holds (with 4 KiB
	// blocks): a workspace's file is rarely beyond it, whatever its
	// holes.
	DefaultMaxFileSize = 16 << 40
	// DefaultMaxTotalSize bounds the sum of the files' sizes, holes
	// included: four of the largest.
	DefaultMaxTotalSize = 64 << 40
)

// Option configures a Store.
type Option func(*Store)

// WithGracePeriod sets how old an unreferenced chunk must be before GC
// deletes it; zero means DefaultGracePeriod. A Save must finish within
// half of it (Save fails rather than write a snapshot that a concurrent
// GC may have robbed), so set it well above twice your slowest Save.
func WithGracePeriod(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.grace = d
		}
	}
}

// WithClockMargin sets how much earlier than the parent's start an
// incremental Save asks its source for changes, to cover a difference
// between the source's clock and this process's; zero means
// DefaultClockMargin.
func WithClockMargin(d time.Duration) Option {
	return func(s *Store) {
		if d > 0 {
			s.clockMargin = d
		}
	}
}

// WithMaxFileSize bounds the size of a file a Save keeps, holes
// included; zero means DefaultMaxFileSize. A larger file is left out of
// the snapshot and named in Info.SkippedPaths, as a path too long is:
// a sandbox's workspace never fails to snapshot for what it holds. Holes
// cost a Save and a restore nothing; the bound is for what is not berth
// (a tar reader, a file system without holes) that gets the snapshot.
func WithMaxFileSize(n int64) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxFileSize = n
		}
	}
}

// WithMaxTotalSize bounds the sum of the sizes of the files a Save keeps,
// holes included; zero means DefaultMaxTotalSize. The files past it, in
// the source's order, are left out as for WithMaxFileSize.
func WithMaxTotalSize(n int64) Option {
	return func(s *Store) {
		if n > 0 {
			s.maxTotalSize = n
		}
	}
}

// withClock replaces time.Now, for tests of the grace period.
func withClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns a Store keeping its snapshots in b. The caller keeps
// ownership of b and closes it after the last use of the Store.
func New(b *blob.Bucket, opts ...Option) *Store {
	s := &Store{
		bucket: b, grace: DefaultGracePeriod, clockMargin: DefaultClockMargin, now: time.Now,
		maxFileSize: DefaultMaxFileSize, maxTotalSize: DefaultMaxTotalSize,
		retry: DefaultRetry, requestTimeout: DefaultRequestTimeout,
	}
	for _, o := range opts {
		o(s)
	}
	var err error
	// No frame checksum: every chunk is verified by its SHA-256 anyway.
	s.enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false))
	if err != nil {
		panic(fmt.Sprintf("snapshot: zstd encoder: %v", err)) // only on bad options, fixed above
	}
	s.dec, err = zstd.NewReader(nil, zstd.WithDecoderMaxMemory(maxChunkSize))
	if err != nil {
		panic(fmt.Sprintf("snapshot: zstd decoder: %v", err))
	}
	return s
}

// Kind says how long a snapshot is kept.
type Kind string

const (
	// KindUser snapshots are kept until deleted. It is the default.
	KindUser Kind = "user"
	// KindCheckpoint snapshots are berth's own, made to recover or
	// resume a sandbox; GC drops the ones GCOptions.DropCheckpoint names.
	KindCheckpoint Kind = "checkpoint"
)

// Info describes a snapshot.
type Info struct {
	ID      string
	Kind    Kind
	Created time.Time // when the snapshot was complete
	Labels  map[string]string
	Files   int   // regular files, hard links not counted
	Size    int64 // bytes of regular file contents, before compression
	// Stored is the compressed size of the chunks this snapshot's save
	// wrote: what it added to the bucket, beside its manifest.
	Stored int64
	// Parent is the snapshot whose chunks the save reused, if any.
	Parent string
	// Source is SaveOptions.Source.
	Source string
	// Skipped counts the paths Save left out because a snapshot cannot
	// carry them (longer than provider.MaxPathLen, below one left out,
	// gone or unreadable when asked for, larger than WithMaxFileSize or
	// past WithMaxTotalSize, or sparse in a format whose holes could not
	// be told from data), and SkippedPaths names the first of them. A
	// workspace never fails to snapshot for its names or its sizes.
	Skipped      int
	SkippedPaths []string
}

// Progress reports how far a Save or an Open has gone.
type Progress struct {
	Files int64 // regular files done
	Bytes int64 // bytes of file contents done, before compression
	// Transferred counts compressed bytes written to the bucket (Save) or
	// read from it (Open).
	Transferred int64
}

// progressInterval is how often Save and Open report progress.
const progressInterval = 500 * time.Millisecond

// Stat describes a snapshot, or returns an error wrapping ErrNotFound.
func (s *Store) Stat(ctx context.Context, id string) (Info, error) {
	if err := checkID(id); err != nil {
		return Info{}, err
	}
	mr, closer, err := s.openManifest(ctx, id)
	if err != nil {
		return Info{}, err
	}
	defer closer()
	return mr.hdr.info(), nil
}

// ids lists the ids of the snapshots whose manifests are in the store.
func (s *Store) ids(ctx context.Context) ([]string, error) {
	var ids []string
	err := s.do(ctx, "list manifests", func(ctx context.Context) error {
		ids = ids[:0]
		it := s.bucket.List(&blob.ListOptions{Prefix: "manifests/"})
		for {
			obj, err := it.Next(ctx)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return fmt.Errorf("snapshot: list manifests: %w", err)
			}
			id := strings.TrimPrefix(obj.Key, "manifests/")
			if obj.IsDir || checkID(id) != nil {
				continue // not one of ours
			}
			ids = append(ids, id)
		}
	})
	return ids, err
}

// List describes every snapshot in the store, oldest first.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	ids, err := s.ids(ctx)
	if err != nil {
		return nil, err
	}
	infos := make([]Info, len(ids))
	found := make([]bool, len(ids))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, id := range ids {
		g.Go(func() error {
			info, err := s.Stat(ctx, id)
			if errors.Is(err, ErrNotFound) {
				return nil // deleted since it was listed
			}
			infos[i], found[i] = info, err == nil
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	var out []Info
	for i := range infos {
		if found[i] {
			out = append(out, infos[i])
		}
	}
	slices.SortStableFunc(out, func(a, b Info) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Delete removes a snapshot's manifest; its chunks are removed by the
// next GC that finds them unreferenced. Deleting a snapshot that does not
// exist is not an error, so that a retried Delete succeeds.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return s.do(ctx, "delete manifest "+id, func(ctx context.Context) error {
		err := s.bucket.Delete(ctx, manifestKey(id))
		if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("snapshot: delete %s: %w", id, err)
		}
		return nil
	})
}

// openManifest opens a manifest and reads its header, retrying as do
// does. The caller calls the returned function when done, within the
// request timeout.
func (s *Store) openManifest(ctx context.Context, id string) (*manifestReader, func(), error) {
	var mr *manifestReader
	var closer func()
	err := s.do(ctx, "read manifest "+id, func(context.Context) error {
		// The attempt's context outlives this function: the caller
		// reads on, and its closer ends it.
		actx, cancel := context.WithTimeout(ctx, s.requestTimeout)
		var err error
		mr, closer, err = s.tryOpenManifest(actx, id)
		if err != nil {
			cancel()
			return err
		}
		c := closer
		closer = func() { c(); cancel() }
		return nil
	})
	return mr, closer, err
}

func (s *Store) tryOpenManifest(ctx context.Context, id string) (*manifestReader, func(), error) {
	r, err := s.bucket.NewReader(ctx, manifestKey(id), nil)
	if err != nil {
		if gcerrors.Code(err) == gcerrors.NotFound {
			return nil, nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return nil, nil, fmt.Errorf("snapshot: read manifest %s: %w", id, err)
	}
	mr, err := newManifestReader(id, r)
	if err != nil {
		r.Close()
		return nil, nil, readErr(ctx, err)
	}
	return mr, func() { mr.Close(); r.Close() }, nil
}

// loadManifest reads and checks a whole manifest.
func (s *Store) loadManifest(ctx context.Context, id string) (*manifest, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var m *manifest
	err := s.do(ctx, "read manifest "+id, func(ctx context.Context) error {
		mr, closer, err := s.tryOpenManifest(ctx, id)
		if err != nil {
			return err
		}
		defer closer()
		m, err = mr.readAll()
		return readErr(ctx, err)
	})
	return m, err
}

// readErr reports a cancelled read as cancelled rather than as the
// corrupt data it looked like when the stream stopped.
func readErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("snapshot: %w", context.Cause(ctx))
	}
	return err
}

// checkID checks a snapshot id, which names a bucket object.
func checkID(id string) error {
	if err := provider.ValidateID(id); err != nil {
		return fmt.Errorf("snapshot id: %w", err)
	}
	return nil
}

func (s *Store) getBuf() *[]byte {
	if b, ok := s.bufs.Get().(*[]byte); ok {
		return b
	}
	return new([]byte)
}

func (s *Store) putBuf(b *[]byte) {
	*b = (*b)[:0]
	s.bufs.Put(b)
}

// reportEvery calls report(get()) every progressInterval until the
// returned function is called, which reports once more and returns after
// the last call.
func reportEvery(report func(Progress), get func() Progress) (stop func()) {
	if report == nil {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				report(get())
			case <-done:
				report(get())
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
