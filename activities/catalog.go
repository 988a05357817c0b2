package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/snapshot"
)

// SnapshotListing describes a snapshot in the store, for front ends.
type SnapshotListing struct {
	ID      string            `json:"id"`
	Kind    string            `json:"kind"`
	Created time.Time         `json:"created"`
	Labels  map[string]string `json:"labels,omitempty"`
	Files   int               `json:"files"`
	Size    int64             `json:"size"`
	Stored  int64             `json:"stored"`
}

// ListSnapshots lists the snapshots in the store.
func (a *Activities) ListSnapshots(ctx context.Context) ([]SnapshotListing, error) {
	if a.Snapshots == nil {
		return nil, toTemporal(fmt.Errorf("%w: this worker keeps no snapshots", errdefs.ErrUnsupported))
	}
	infos, err := a.Snapshots.List(ctx)
	if err != nil {
		return nil, toTemporal(err)
	}
	out := make([]SnapshotListing, len(infos))
	for i, in := range infos {
		out[i] = SnapshotListing{ID: in.ID, Kind: string(in.Kind), Created: in.Created, Labels: in.Labels,
			Files: in.Files, Size: in.Size, Stored: in.Stored}
	}
	return out, nil
}

// RemoveSnapshot deletes a snapshot for a user (its chunks go at the
// next garbage collection): unlike DeleteSnapshot, one that does not
// exist is NotFound.
func (a *Activities) RemoveSnapshot(ctx context.Context, id string) error {
	if a.Snapshots == nil {
		return toTemporal(fmt.Errorf("%w: this worker keeps no snapshots", errdefs.ErrUnsupported))
	}
	if _, err := a.Snapshots.Stat(ctx, id); err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return toTemporal(fmt.Errorf("%w: no snapshot %q", errdefs.ErrNotFound, id))
		}
		return toTemporal(err)
	}
	return toTemporal(a.Snapshots.Delete(ctx, id))
}
