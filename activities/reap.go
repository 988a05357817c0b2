package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer"
)

// Owner names the workflow run that owns a sandbox or a checkpoint.
type Owner struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id,omitempty"`
}

// OwnersClosed reports, for each owner, whether it has ended: completed,
// failed, canceled, terminated or timed out, or no longer known to the
// server. A run that continued as new lives on in its successor.
func (a *Activities) OwnersClosed(ctx context.Context, owners []Owner) ([]bool, error) {
	if a.Client == nil {
		return nil, toTemporal(fmt.Errorf("%w: this worker has no Temporal client", provider.ErrUnsupported))
	}
	closed := make([]bool, len(owners))
	for i, o := range owners {
		c, err := a.ownerClosed(ctx, o.WorkflowID, o.RunID)
		if err != nil {
			return nil, fmt.Errorf("describe workflow %s: %w", o.WorkflowID, err) // retried
		}
		closed[i] = c
	}
	return closed, nil
}

func (a *Activities) ownerClosed(ctx context.Context, workflowID, runID string) (bool, error) {
	_, closed, err := a.ownerClosedAt(ctx, workflowID, runID)
	return closed, err
}

// ReapSnapshotsInput names the labels that name a checkpoint's owner.
type ReapSnapshotsInput struct {
	LabelWorkflowID string `json:"label_workflow_id"`
	LabelRunID      string `json:"label_run_id"`
}

// ReapSnapshotsOutput says what ReapSnapshots removed.
type ReapSnapshotsOutput struct {
	Checkpoints int `json:"checkpoints"` // deleted, their owner closed
	Chunks      int `json:"chunks"`      // unreferenced chunks removed
}

// ReapSnapshots deletes the checkpoints whose owning workflow (named by
// the labels given) has closed, then the chunks no snapshot refers to any
// more. Users' snapshots are kept until deleted.
func (a *Activities) ReapSnapshots(ctx context.Context, in ReapSnapshotsInput) (ReapSnapshotsOutput, error) {
	if a.Snapshots == nil {
		return ReapSnapshotsOutput{}, nil
	}
	stats, err := a.Snapshots.GC(ctx, snapshot.GCOptions{
		DropCheckpoint: func(info snapshot.Info) bool {
			id := info.Labels[in.LabelWorkflowID]
			if id == "" || a.Client == nil {
				return false
			}
			closed, err := a.ownerClosed(ctx, id, info.Labels[in.LabelRunID])
			return err == nil && closed
		},
	})
	if err != nil {
		return ReapSnapshotsOutput{}, toTemporal(snapshotError(err))
	}
	return ReapSnapshotsOutput{Checkpoints: stats.Dropped, Chunks: stats.Deleted}, nil
}

// TransferMaxAge is how long uploads and exports may stay in the blob
// store: front ends delete theirs when done, so what is older was left
// by one that died.
const TransferMaxAge = time.Hour

// SweepTransfers deletes the uploads and exports older than maxAge
// (TransferMaxAge when zero), and says how many it deleted.
func (a *Activities) SweepTransfers(ctx context.Context, maxAge time.Duration) (int, error) {
	if maxAge <= 0 {
		maxAge = TransferMaxAge
	}
	cutoff := time.Now().Add(-maxAge)
	deleted := 0
	for _, prefix := range []string{transfer.Uploads, transfer.Exports} {
		it := a.Outputs.List(&blob.ListOptions{Prefix: prefix})
		for {
			obj, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return deleted, toTemporal(fmt.Errorf("list %s: %w", prefix, err))
			}
			if obj.IsDir || !obj.ModTime.Before(cutoff) {
				continue
			}
			if err := a.Outputs.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return deleted, toTemporal(fmt.Errorf("delete %s: %w", obj.Key, err))
			}
			deleted++
		}
	}
	return deleted, nil
}
