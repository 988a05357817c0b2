package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer"
)

// Owner names the workflow run that owns a sandbox or a checkpoint; for
// a sandbox, its id and base (LabelSandbox) too.
type Owner struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id,omitempty"`
	Sandbox    string `json:"sandbox,omitempty"`
	Base       string `json:"base,omitempty"`
	Provider   string `json:"provider,omitempty"`
}

// OwnersClosed reports, for each owner, whether it has ended: completed,
// failed, canceled, terminated or timed out, or no longer known to the
// server. A run that continued as new lives on in its successor. An
// owner that names its Sandbox, held on this host, and lives on, but
// uses another copy of it now (Superseded: it moved to another host
// while this one was away, or was hibernated or recovered meanwhile),
// is reported closed too: the copy here is no longer its.
func (a *Activities) OwnersClosed(ctx context.Context, owners []Owner) ([]bool, error) {
	if a.Client == nil {
		return nil, toTemporal(fmt.Errorf("%w: this worker has no Temporal client", errdefs.ErrUnsupported))
	}
	closed := make([]bool, len(owners))
	for i, o := range owners {
		c, err := a.ownerClosed(ctx, o.WorkflowID, o.RunID)
		if err != nil {
			return nil, fmt.Errorf("describe workflow %s: %w", o.WorkflowID, err) // retried
		}
		if !c && o.Sandbox != "" {
			host := a.HostQueue // where the copy is; of a provider any worker serves, anywhere
			if p, ok := a.Providers[o.Provider]; !ok || !p.Capabilities().HostBound {
				host = ""
			}
			if c, err = Superseded(ctx, a.Client, o.WorkflowID, host, o.Base, o.Sandbox); err != nil {
				return nil, fmt.Errorf("ask workflow %s about sandbox %s: %w", o.WorkflowID, o.Sandbox, err) // retried
			}
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
// store after their last part was written: front ends delete theirs
// when done, so what is older was left by one that died.
const TransferMaxAge = time.Hour

// SweepTransfers deletes the uploads and exports whose newest part is
// older than maxAge (TransferMaxAge when zero), and says how many objects
// it deleted. A stream goes whole or not at all: an upload still being
// written keeps its first parts however old they are.
func (a *Activities) SweepTransfers(ctx context.Context, maxAge time.Duration) (int, error) {
	if maxAge <= 0 {
		maxAge = TransferMaxAge
	}
	cutoff := time.Now().Add(-maxAge)
	deleted := 0
	for _, prefix := range []string{transfer.Uploads, transfer.Exports} {
		type stream struct {
			keys   []string
			newest time.Time
		}
		streams := map[string]*stream{}
		var order []string
		it := a.Outputs.List(&blob.ListOptions{Prefix: prefix})
		for {
			obj, err := it.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return deleted, toTemporal(fmt.Errorf("list %s: %w", prefix, err))
			}
			if obj.IsDir {
				continue
			}
			name := streamOf(obj.Key)
			st := streams[name]
			if st == nil {
				st = &stream{}
				streams[name] = st
				order = append(order, name)
			}
			st.keys = append(st.keys, obj.Key)
			if obj.ModTime.After(st.newest) {
				st.newest = obj.ModTime
			}
		}
		for _, name := range order {
			st := streams[name]
			if !st.newest.Before(cutoff) {
				continue
			}
			for _, key := range st.keys {
				if err := a.Outputs.Delete(ctx, key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
					return deleted, toTemporal(fmt.Errorf("delete %s: %w", key, err))
				}
				deleted++
			}
		}
	}
	return deleted, nil
}

// streamOf is the stream a stored object is part of: its key less the
// part's name (transfer.PartKey, transfer.PartialKey), or the key itself
// for an object stored whole.
func streamOf(key string) string {
	dir, part := path.Split(key)
	digits := strings.TrimSuffix(part, ".partial")
	if dir == "" || len(digits) < 6 || strings.Trim(digits, "0123456789") != "" {
		return key
	}
	return strings.TrimSuffix(dir, "/")
}
