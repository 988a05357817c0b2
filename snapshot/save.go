package snapshot

import (
	"errors"
	"github.com/berth-dev/berth/internal/randid"
	"time"

	"bytes"
	"context"
	"fmt"

	"gocloud.dev/blob"

	"github.com/berth-dev/berth/provider"
)

// How Save cuts file contents into chunks.
//
// Fixed-size chunks, not content-defined ones: measured here, restic's
// Rabin chunker runs at 330-530 MB/s on one core, about as slow as zstd
// -1 on data that does not compress, and would cost the first snapshot
// its race against tar|zstd. What content-defined chunking adds, dedup
// after an insertion in the middle of a large file, is rare in
// workspaces: large files there are rewritten whole (build outputs),
// appended to (logs) or changed in place (databases), all of which fixed
// chunks handle.
//
// 4 MiB, not 1: zstd compressed a workspace 15% faster in 4 MiB pieces
// than in 1 MiB ones (its per-call set-up), and a quarter of the objects
// means a quarter of the requests. A one-byte change in a large file
// stores 4 MiB at most.
//
// Small files are packed because a workspace holds tens of thousands of
// them: one object each would mean as many requests per snapshot.
const (
	chunkSize = 4 << 20   // large files are cut into chunks of this size
	packLimit = 256 << 10 // files smaller than this are packed together
	packSize  = chunkSize // a pack is sealed before the file that would take it past this
)

// uploaders is how many chunk writes run at once. Writes are I/O, so
// more of them than cores keeps a remote bucket busy.
const uploaders = 8

// SaveOptions says how to save a snapshot. The zero value saves a user
// snapshot with a random id, reading every file.
type SaveOptions struct {
	// Kind is KindUser when empty.
	Kind Kind
	// Labels are kept with the snapshot, e.g. the sandbox id and the
	// owning workflow; see provider.ValidateLabels for their limits.
	Labels map[string]string
	// ID names the snapshot (see provider.ValidateID); empty means a new
	// random id. When a snapshot with this id exists, Save returns it and
	// reads nothing, so a retried Save does not save twice.
	ID string
	// Parent names an earlier snapshot of the same workspace: chunks it
	// references are not looked up nor written again. A parent that does
	// not exist is ignored (Info.Parent is then empty). It must not be
	// deleted while the Save runs.
	Parent string
	// Source names the workspace the Source reads, e.g. the provider and
	// the sandbox id. When it is not empty and equal to the parent's, Save
	// asks the source only for what changed since the parent started,
	// trusting the source's ctimes against this process's clock (give or
	// take WithClockMargin). So it must name one filesystem on one clock:
	// include the host for a host-bound sandbox, and give a sandbox that
	// was re-created a new name.
	Source string
	// RestoredAt, when not zero, says that Parent was restored into this
	// workspace, the restore ending at RestoredAt by the source's clock:
	// files whose status has not changed since are Parent's, and Save asks
	// the source only for the others. This is what makes the snapshot of
	// a sandbox woken from a checkpoint cheap. No margin applies: give it
	// only when the source's clock is this process's.
	RestoredAt time.Time
	// Progress, if not nil, is called from a goroutine of Save's every
	// half second and once at the end, never twice at once.
	Progress func(Progress)
}

// Save reads the workspace from src and stores it as a new snapshot.
// Nothing is saved when it fails: the chunks it wrote are removed by a
// later GC.
func (s *Store) Save(ctx context.Context, src Source, opts SaveOptions) (Info, error) {
	kind, err := opts.check()
	if err != nil {
		return Info{}, err
	}
	id := opts.ID
	if id == "" {
		id = newID()
	} else {
		// Read whole, not just its header: a manifest is what makes a
		// snapshot, and one that is not whole is saved again.
		m, err := s.loadManifest(ctx, id)
		switch {
		case err == nil:
			return m.info(), nil
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrCorrupt):
		default:
			return Info{}, err
		}
	}

	started := s.now().UTC()
	sv := &saver{store: s, src: src}
	if opts.Parent != "" {
		parent, err := s.loadManifest(ctx, opts.Parent)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return Info{}, fmt.Errorf("snapshot: parent: %w", err)
		default:
			sv.useParent(parent)
		}
	}
	var since time.Time
	switch {
	case sv.parent == nil:
	case !opts.RestoredAt.IsZero():
		since = opts.RestoredAt
	case opts.Source != "" && sv.parent.Source == opts.Source:
		since = sv.parent.Started.Add(-s.clockMargin)
	}
	if err := sv.run(ctx, since, opts.Progress); err != nil {
		return Info{}, err
	}
	// Past half the grace period, a GC may have deleted a chunk this
	// save found in the bucket and did not write again (see putChunk).
	if took := s.now().Sub(started); took > s.grace/2 {
		return Info{}, fmt.Errorf("snapshot: save took %s, more than half the GC grace period (%s), so its chunks may be gone: raise the grace period with WithGracePeriod", took.Round(time.Second), s.grace)
	}

	m := &manifest{
		header: header{
			Version: formatVersion,
			ID:      id,
			Kind:    kind,
			Created: s.now().UTC(),
			Started: started,
			Labels:  opts.Labels,
			Source:  opts.Source,
			Entries: len(sv.entries),
			Files:   sv.files,
			Size:    sv.size,
			Stored:  sv.transferred.Load(),
			Skipped: sv.skipped,
		},
		entries: sv.entries,
	}
	if sv.parent != nil {
		m.Parent = sv.parent.ID
	}
	data, err := encodeManifest(m)
	if err != nil {
		return Info{}, fmt.Errorf("snapshot: encode manifest: %w", err)
	}
	// The manifest last, in one request: until it is in the bucket
	// whole, there is no snapshot, only chunks a GC removes.
	err = s.do(ctx, "write manifest "+id, func(ctx context.Context) error {
		err := s.bucket.Upload(ctx, manifestKey(id), bytes.NewReader(data), &blob.WriterOptions{ContentType: "application/zstd"})
		if err != nil {
			return fmt.Errorf("snapshot: write manifest %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	info := m.info()
	info.SkippedPaths = sv.skippedPaths
	return info, nil
}

// check checks the options and returns the kind of snapshot to save.
func (opts *SaveOptions) check() (Kind, error) {
	kind := opts.Kind
	if kind == "" {
		kind = KindUser
	}
	if kind != KindUser && kind != KindCheckpoint {
		return "", fmt.Errorf("%w: snapshot kind %q: want %q or %q", ErrBadInput, truncate(string(kind)), KindUser, KindCheckpoint)
	}
	if err := provider.ValidateLabels(opts.Labels); err != nil {
		return "", fmt.Errorf("snapshot labels: %w", err)
	}
	if opts.ID != "" {
		if err := checkID(opts.ID); err != nil {
			return "", err
		}
	}
	if opts.Parent != "" {
		if err := checkID(opts.Parent); err != nil {
			return "", fmt.Errorf("parent: %w", err)
		}
	}
	return kind, nil
}

// newID returns a random snapshot id. Ids are random, not derived from
// the contents: two saves of the same tree with different labels or kinds
// are two snapshots, each deleted on its own, and the id is known before
// the tree is read.
func newID() string { return randid.Hex(16) }
