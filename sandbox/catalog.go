package sandbox

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/snapshot"
)

// Snapshot kinds: a user's snapshot is kept until deleted; a checkpoint
// is berth's own, and goes with its sandbox or its owner.
const (
	SnapshotUser       = string(snapshot.KindUser)
	SnapshotCheckpoint = string(snapshot.KindCheckpoint)
)

// SnapshotListing describes a snapshot in the store, for front ends.
type SnapshotListing struct {
	ID      string            `json:"id"`
	Kind    string            `json:"kind"` // SnapshotUser or SnapshotCheckpoint
	Created time.Time         `json:"created"`
	Labels  map[string]string `json:"labels,omitempty"`
	Files   int               `json:"files"`
	Size    int64             `json:"size"`   // bytes of files
	Stored  int64             `json:"stored"` // bytes this snapshot added to the store
}

// ListSnapshots lists the snapshots in the store of the workers on
// queue (DefaultQueue when empty).
func ListSnapshots(ctx workflow.Context, queue string) ([]SnapshotListing, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	listed, err := call[[]activities.SnapshotListing](ctx, sharedOptions(queue), acts.ListSnapshots, nil)
	out := make([]SnapshotListing, len(listed))
	for i, l := range listed {
		out[i] = SnapshotListing(l)
	}
	return out, err
}

// RemoveSnapshot deletes a snapshot from the store of the workers on
// queue (DefaultQueue when empty); one that does not exist is an error
// wrapping errdefs.ErrNotFound.
func RemoveSnapshot(ctx workflow.Context, queue, id string) error {
	if queue == "" {
		queue = DefaultQueue
	}
	_, err := call[struct{}](ctx, sharedOptions(queue), acts.RemoveSnapshot, id)
	return err
}
