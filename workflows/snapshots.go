package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
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
	Snapshots []sandbox.SnapshotListing `json:"snapshots,omitempty"`
	Deleted   []string                  `json:"deleted,omitempty"`
	Failed    []SnapshotFailure         `json:"failed,omitempty"`
}

// SnapshotFailure says why a snapshot could not be deleted.
type SnapshotFailure struct {
	ID      string        `json:"id"`
	Kind    provider.Kind `json:"kind"`
	Message string        `json:"message"`
}

// Snapshots lists or deletes snapshots: how front ends reach the
// snapshot store, which only workers can. A snapshot that cannot be
// deleted (it does not exist: NotFound) is reported in the output.
func Snapshots(ctx workflow.Context, in SnapshotsInput) (SnapshotsOutput, error) {
	if len(in.Delete) == 0 {
		list, err := sandbox.ListSnapshots(ctx, "")
		return SnapshotsOutput{Snapshots: list}, updateError(err)
	}
	var out SnapshotsOutput
	for _, id := range in.Delete {
		err := provider.ValidateID(id)
		if err == nil {
			err = sandbox.RemoveSnapshot(ctx, "", id)
		}
		if err != nil {
			out.Failed = append(out.Failed, SnapshotFailure{ID: id, Kind: provider.KindOf(err), Message: err.Error()})
			continue
		}
		out.Deleted = append(out.Deleted, id)
	}
	return out, nil
}
