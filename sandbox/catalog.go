package sandbox

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
)

// Snapshot listings, for front ends.
type SnapshotListing = activities.SnapshotListing

// ListSnapshots lists the snapshots in the store of the workers on
// queue (DefaultQueue when empty).
func ListSnapshots(ctx workflow.Context, queue string) ([]SnapshotListing, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	o := activityOptions(queue, 0)
	o.ScheduleToStartTimeout = 0
	return call[[]SnapshotListing](ctx, o, acts.ListSnapshots, nil)
}

// RemoveSnapshot deletes a snapshot from the store of the workers on
// queue (DefaultQueue when empty); one that does not exist is an error
// wrapping provider.ErrNotFound.
func RemoveSnapshot(ctx workflow.Context, queue, id string) error {
	if queue == "" {
		queue = DefaultQueue
	}
	o := activityOptions(queue, 0)
	o.ScheduleToStartTimeout = 0
	_, err := call[struct{}](ctx, o, acts.RemoveSnapshot, id)
	return err
}
