package workflows

import (
	"github.com/berth-dev/berth/errdefs"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/sandbox"
)

// SnapshotsInput asks the workers' snapshot store for its list, or to
// delete the snapshots named.
type SnapshotsInput struct {
	Delete []string `json:"delete,omitempty"`
}

// SnapshotsOutput is the list, or the ids deleted and those that could
// not be.
type SnapshotsOutput struct {
	Snapshots []refs.Snapshot   `json:"snapshots,omitempty"`
	Deleted   []string          `json:"deleted,omitempty"`
	Failed    []SnapshotFailure `json:"failed,omitempty"`
}

// SnapshotFailure says why a snapshot could not be deleted.
type SnapshotFailure struct {
	ID      string       `json:"id"`
	Kind    errdefs.Kind `json:"kind"`
	Message string       `json:"message"`
}

// Snapshots lists or deletes snapshots, a workflow each time. It is
// registered under its legacy name only, for front ends older than
// berth.Catalog, which answers the same (UpdateSnapshots).
func Snapshots(ctx workflow.Context, in SnapshotsInput) (SnapshotsOutput, error) {
	return snapshots(ctx, "", in)
}

// snapshots lists or deletes snapshots in the store of the workers on
// queue: how front ends reach the snapshot store, which only workers
// can. A snapshot that cannot be deleted (it does not exist: NotFound)
// is reported in the output.
func snapshots(ctx workflow.Context, queue string, in SnapshotsInput) (SnapshotsOutput, error) {
	if len(in.Delete) == 0 {
		list, err := sandbox.ListSnapshots(ctx, queue)
		return SnapshotsOutput{Snapshots: list}, updateError(err)
	}
	var out SnapshotsOutput
	for _, id := range in.Delete {
		err := provider.ValidateID(id)
		if err == nil {
			err = sandbox.RemoveSnapshot(ctx, queue, id)
		}
		if err != nil {
			out.Failed = append(out.Failed, SnapshotFailure{ID: id, Kind: errdefs.KindOf(err), Message: err.Error()})
			continue
		}
		out.Deleted = append(out.Deleted, id)
	}
	return out, nil
}
