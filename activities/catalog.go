package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/snapshot"
)

// ListSnapshots lists the snapshots in the store.
func (a *Activities) ListSnapshots(ctx context.Context) ([]refs.Snapshot, error) {
	if a.Snapshots == nil {
		return nil, toTemporal(errNoStore)
	}
	infos, err := a.Snapshots.List(ctx)
	if err != nil {
		return nil, toTemporal(err)
	}
	out := make([]refs.Snapshot, len(infos))
	for i, in := range infos {
		out[i] = refOf(in)
	}
	return out, nil
}

// RemoveSnapshot deletes a snapshot for a user (its chunks go at the
// next garbage collection): unlike DeleteSnapshot, one that does not
// exist is NotFound.
func (a *Activities) RemoveSnapshot(ctx context.Context, id string) error {
	if a.Snapshots == nil {
		return toTemporal(errNoStore)
	}
	if _, err := a.Snapshots.Stat(ctx, id); err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return toTemporal(fmt.Errorf("%w: no snapshot %q", errdefs.ErrNotFound, id))
		}
		return toTemporal(err)
	}
	return toTemporal(a.Snapshots.Delete(ctx, id))
}

// StatSnapshot describes one snapshot of the store: what a sandbox that
// is to be made from it later (sandbox.StartHibernated) checks at once,
// so that a snapshot that is not there is NotFound when the sandbox is
// asked for, not when it is first used.
func (a *Activities) StatSnapshot(ctx context.Context, id string) (refs.Snapshot, error) {
	if a.Snapshots == nil {
		return refs.Snapshot{}, toTemporal(errNoStore)
	}
	in, err := a.Snapshots.Stat(ctx, id)
	if err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			// "sandbox not found" before it would mislead.
			return refs.Snapshot{}, toTemporal(errdefs.Errorf(errdefs.NotFound, "no snapshot %q in the store", id))
		}
		return refs.Snapshot{}, toTemporal(snapshotError(err))
	}
	return refOf(in), nil
}

// errNoStore is what a worker without a snapshot store answers about
// snapshots.
var errNoStore = fmt.Errorf("%w: this worker keeps no snapshots", errdefs.ErrUnsupported)

// refOf is a snapshot as workflows see it.
func refOf(in snapshot.Info) refs.Snapshot {
	return refs.Snapshot{ID: in.ID, Kind: string(in.Kind), Created: in.Created, Labels: in.Labels,
		Files: in.Files, Size: in.Size, Stored: in.Stored}
}
