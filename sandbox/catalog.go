package sandbox

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/snapshot"
)

// Snapshot kinds: a user's snapshot is kept until deleted; a checkpoint
// is berth's own, and goes with its sandbox or its owner.
const (
	SnapshotUser       = string(snapshot.KindUser)
	SnapshotCheckpoint = string(snapshot.KindCheckpoint)
)

// ListSnapshots lists the snapshots in the store of the workers on
// queue (DefaultQueue when empty).
func ListSnapshots(ctx workflow.Context, queue string) ([]refs.Snapshot, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	return call[[]refs.Snapshot](ctx, sharedOptions(queue), acts.ListSnapshots, nil)
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
