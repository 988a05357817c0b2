package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer"
)

// Snapshot kinds: a user's snapshot is kept until deleted; a checkpoint
// is berth's own and is garbage-collected when nothing refers to it.
const (
	SnapshotUser       = string(snapshot.KindUser)
	SnapshotCheckpoint = string(snapshot.KindCheckpoint)
)

// SnapshotInput asks for a snapshot of a sandbox's workspace.
type SnapshotInput struct {
	Sandbox refs.Sandbox `json:"sandbox"`
	// ID names the snapshot: a retried activity finds the snapshot its
	// first attempt saved.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Parent is an earlier snapshot of the same workspace: what it holds
	// is neither read nor stored again.
	Parent string            `json:"parent,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// RestoredAt, when not zero, is when Parent was restored into the
	// sandbox (Restore's result): what did not change since is not read.
	RestoredAt time.Time `json:"restored_at,omitzero"`
}

// SnapshotInfo describes a snapshot taken.
type SnapshotInfo struct {
	ID      string    `json:"id"`
	Files   int       `json:"files"`
	Size    int64     `json:"size"`   // bytes of files
	Stored  int64     `json:"stored"` // bytes this snapshot added to the store
	Created time.Time `json:"created"`
	// Skipped counts the files the snapshot left out (see
	// snapshot.Info.Skipped), SkippedPaths names the first few, and why.
	Skipped      int      `json:"skipped,omitempty"`
	SkippedPaths []string `json:"skipped_paths,omitempty"`
}

// RestoreInput asks for a snapshot to be unpacked into a sandbox's
// workspace.
type RestoreInput struct {
	Sandbox  refs.Sandbox `json:"sandbox"`
	Snapshot string       `json:"snapshot"`
}

// Snapshot saves a sandbox's workspace in the snapshot store,
// heartbeating its progress. Only the snapshot's id returns through
// history.
func (a *Activities) Snapshot(ctx context.Context, in SnapshotInput) (SnapshotInfo, error) {
	return returned(a.snapshot(ctx, in))
}

func (a *Activities) snapshot(ctx context.Context, in SnapshotInput) (SnapshotInfo, error) {
	if a.Snapshots == nil {
		return SnapshotInfo{}, fmt.Errorf("%w: this worker has no snapshot store", errdefs.ErrUnsupported)
	}
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return SnapshotInfo{}, err
	}
	// The span is the provider's too: the snapshot reads the workspace
	// through the sandbox.
	start := time.Now()
	progress, stop := progressBeat(ctx)
	defer stop()
	pctx, end := a.traceProvider(ctx, "snapshot", in.Sandbox.Provider, in.Sandbox.ID)
	info, err := a.Snapshots.Save(pctx, snapshot.SandboxSource(sb), snapshot.SaveOptions{
		ID: in.ID, Kind: snapshot.Kind(in.Kind), Labels: in.Labels, Parent: in.Parent, RestoredAt: in.RestoredAt,
		// The queue names the host of a host-bound sandbox.
		Source:   in.Sandbox.Queue + "/" + in.Sandbox.Provider + "/" + in.Sandbox.ID,
		Progress: progress,
	})
	end(err)
	if err != nil {
		return SnapshotInfo{}, snapshotError(err)
	}
	a.metrics().Snapshotted(in.Sandbox.Provider, in.Kind, info.Stored, time.Since(start))
	a.metrics().BlobWritten(BlobSnapshot, info.Stored)
	if info.Skipped > 0 {
		activity.GetLogger(ctx).Warn("the snapshot left files out", "snapshot", info.ID, "skipped", info.Skipped, "paths", info.SkippedPaths)
	}
	return SnapshotInfo{
		ID: info.ID, Files: info.Files, Size: info.Size, Stored: info.Stored, Created: info.Created,
		Skipped: info.Skipped, SkippedPaths: info.SkippedPaths,
	}, nil
}

// RestoreOutput says when a restore ended, by the sandbox host's clock
// for a host-bound sandbox (SnapshotInput.RestoredAt).
type RestoreOutput struct {
	At time.Time `json:"at,omitzero"`
}

// Restore unpacks a snapshot into a sandbox's workspace. Restoring it
// again writes the same files again.
func (a *Activities) Restore(ctx context.Context, in RestoreInput) (RestoreOutput, error) {
	return returned(a.restore(ctx, in))
}

func (a *Activities) restore(ctx context.Context, in RestoreInput) (RestoreOutput, error) {
	if a.Snapshots == nil {
		return RestoreOutput{}, fmt.Errorf("%w: this worker has no snapshot store", errdefs.ErrUnsupported)
	}
	p, err := a.provider(in.Sandbox.Provider)
	if err != nil {
		return RestoreOutput{}, err
	}
	sb, err := p.Get(ctx, in.Sandbox.ID)
	if err != nil {
		return RestoreOutput{}, err
	}
	var read atomic.Int64 // compressed bytes read from the store, told last as the stream closes
	progress, stop := progressBeat(ctx)
	defer stop()
	rc, err := a.Snapshots.Open(ctx, in.Snapshot, func(p snapshot.Progress) {
		read.Store(p.Transferred)
		progress(p)
	})
	if err != nil {
		return RestoreOutput{}, snapshotError(err)
	}
	defer func() { a.metrics().BlobRead(BlobSnapshot, read.Load()) }()
	defer rc.Close()
	pctx, end := a.traceProvider(ctx, "import", in.Sandbox.Provider, in.Sandbox.ID)
	err = sb.Import(pctx, rc)
	end(err)
	if err != nil {
		return RestoreOutput{}, snapshotError(err)
	}
	var out RestoreOutput
	// Only this host's clock is the sandbox's: elsewhere, no shortcut.
	if p.Capabilities().HostBound {
		out.At = time.Now()
	}
	return out, nil
}

// progressBeat heartbeats the activity of ctx with the last progress
// given to the function it returns, as that function is called and
// every few seconds besides until stop is called: a Save or an Open
// waiting for a blob store that does not answer (it retries it, for up
// to snapshot.WithRetry) reports no progress, yet its worker is alive.
func progressBeat(ctx context.Context) (progress func(snapshot.Progress), stop func()) {
	var last atomic.Pointer[snapshot.Progress]
	last.Store(&snapshot.Progress{})
	progress = func(p snapshot.Progress) {
		last.Store(&p)
		activity.RecordHeartbeat(ctx, p)
	}
	return progress, heartbeatLoop(ctx, func() any { return *last.Load() })
}

// DeleteSnapshot deletes a snapshot; one already gone is not an error.
func (a *Activities) DeleteSnapshot(ctx context.Context, id string) error {
	return toTemporal(a.deleteSnapshot(ctx, id))
}

func (a *Activities) deleteSnapshot(ctx context.Context, id string) error {
	if a.Snapshots == nil {
		return nil
	}
	err := a.Snapshots.Delete(ctx, id)
	if errors.Is(err, snapshot.ErrNotFound) {
		return nil
	}
	return snapshotError(err)
}

// snapshotError gives the snapshot store's errors their provider kinds,
// so that workflows see them typed and only transient ones are retried.
func snapshotError(err error) error {
	switch {
	case err == nil:
		return nil
	// Their own messages say what happened: "sandbox not found" before
	// them would mislead.
	case errors.Is(err, snapshot.ErrNotFound):
		return errdefs.Errorf(errdefs.NotFound, "%v", err)
	case errors.Is(err, snapshot.ErrCorrupt):
		return errdefs.Errorf(errdefs.BadInput, "%v", err)
	}
	return err
}

// ImportInput names a tar stream in the output blob store to unpack into
// a sandbox's workspace: how files too large for history get in. A
// stream stored in parts (transfer's relay writes uploads so) gives
// their number; zero means one object.
type ImportInput struct {
	Sandbox refs.Sandbox `json:"sandbox"`
	Blob    string       `json:"blob"`
	Parts   int          `json:"parts,omitempty"`
}

// Import unpacks a tar stream from the blob store into a sandbox's
// workspace, over what is there; whoever put it there deletes it.
// Importing it again writes the same files again.
func (a *Activities) Import(ctx context.Context, in ImportInput) error {
	return toTemporal(a.importBlob(ctx, in))
}

func (a *Activities) importBlob(ctx context.Context, in ImportInput) error {
	if err := CheckUpload(in.Blob); err != nil {
		return err
	}
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return err
	}
	first := in.Blob
	if in.Parts > 0 {
		first = transfer.PartKey(in.Blob, 0)
	}
	if ok, err := a.Outputs.Exists(ctx, first); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: no upload %q in this worker's blob store", errdefs.ErrBadInput, in.Blob)
	}
	var r io.ReadCloser
	if in.Parts > 0 {
		r, err = transfer.Open(ctx, a.Outputs, transfer.Output{Blob: in.Blob, Parts: in.Parts})
	} else {
		r, err = a.Outputs.NewReader(ctx, in.Blob, nil)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	br := &beatingReader{ctx: ctx, r: r}
	pctx, end := a.traceProvider(ctx, "import", in.Sandbox.Provider, in.Sandbox.ID)
	err = sb.Import(pctx, br)
	end(err)
	a.metrics().BlobRead(BlobUpload, br.total)
	return err
}

// beatingReader heartbeats as it is read: an import of gigabytes takes
// longer than a heartbeat timeout.
type beatingReader struct {
	ctx   context.Context
	r     io.Reader
	total int64
	last  time.Time
}

func (b *beatingReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.total += int64(n)
	if time.Since(b.last) > heartbeatEvery {
		activity.RecordHeartbeat(b.ctx, b.total)
		b.last = time.Now()
	}
	return n, err
}

// CheckUpload refuses a blob key that does not name an upload: Import
// must not read outputs or snapshots into a sandbox.
func CheckUpload(key string) error {
	if err := transfer.CheckUpload(key); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrBadInput, err)
	}
	return nil
}
