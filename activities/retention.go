package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/berth-dev/berth/transfer"
)

// ownersPrefix holds one record per sandbox: the labels naming its owner.
const ownersPrefix = "owners/"

// recordOwner stores the labels of sandbox id, which name its owner. A
// sandbox without an id (the provider picks one) stores nothing the
// reaper could find by it, and records nothing.
func (a *Activities) recordOwner(ctx context.Context, id string, labels map[string]string) error {
	if id == "" || a.Outputs == nil {
		return nil
	}
	b, err := json.Marshal(labels)
	if err != nil {
		return err
	}
	if err := a.Outputs.WriteAll(ctx, ownersPrefix+id, b, nil); err != nil {
		return fmt.Errorf("record the owner of %s: %w", id, err)
	}
	return nil
}

// SweepOutputsInput says which labels name a sandbox's owner, and how
// long its outputs outlive the owner (zero: transfer.DefaultOutputRetention).
type SweepOutputsInput struct {
	LabelWorkflowID string        `json:"label_workflow_id"`
	LabelRunID      string        `json:"label_run_id"`
	Retention       time.Duration `json:"retention,omitempty"`
}

// SweepOutputs deletes what sandboxes stored in the blob store (outputs,
// files read, exports, uploads) once their owner has been closed for
// longer than the retention, and says for how many sandboxes it did.
func (a *Activities) SweepOutputs(ctx context.Context, in SweepOutputsInput) (int, error) {
	n, err := a.sweepOutputs(ctx, in)
	return n, toTemporal(err)
}

func (a *Activities) sweepOutputs(ctx context.Context, in SweepOutputsInput) (int, error) {
	if a.Client == nil {
		return 0, nil
	}
	retention := in.Retention
	if retention <= 0 {
		retention = transfer.DefaultOutputRetention
	}
	swept := 0
	it := a.Outputs.List(&blob.ListOptions{Prefix: ownersPrefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return swept, nil
		}
		if err != nil {
			return swept, fmt.Errorf("list owners: %w", err)
		}
		sandboxID := strings.TrimPrefix(obj.Key, ownersPrefix)
		b, err := a.Outputs.ReadAll(ctx, obj.Key)
		if err != nil {
			return swept, err
		}
		var labels map[string]string
		if json.Unmarshal(b, &labels) != nil || labels[in.LabelWorkflowID] == "" {
			continue // no owner to wait for: kept, as a sandbox without one is
		}
		closedAt, closed, err := a.ownerClosedAt(ctx, labels[in.LabelWorkflowID], labels[in.LabelRunID])
		if err != nil {
			return swept, fmt.Errorf("describe workflow %s: %w", labels[in.LabelWorkflowID], err)
		}
		if !closed || time.Since(closedAt) < retention {
			continue
		}
		for _, prefix := range transfer.SandboxPrefixes(sandboxID) {
			if err := DeletePrefix(ctx, a.Outputs, prefix); err != nil {
				return swept, err
			}
		}
		if err := a.Outputs.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return swept, err
		}
		swept++
	}
}

// ownerClosedAt says whether a workflow run has closed, and when; one
// the server no longer knows closed long ago.
func (a *Activities) ownerClosedAt(ctx context.Context, workflowID, runID string) (time.Time, bool, error) {
	desc, err := a.Client.DescribeWorkflowExecution(ctx, workflowID, runID)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return time.Time{}, true, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	info := desc.GetWorkflowExecutionInfo()
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return time.Time{}, false, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		if runID != "" {
			return a.ownerClosedAt(ctx, workflowID, "") // lives on in its successor
		}
		return time.Time{}, false, nil
	}
	return info.GetCloseTime().AsTime(), true, nil
}

// deletePrefix deletes every object under prefix.
func DeletePrefix(ctx context.Context, bucket *blob.Bucket, prefix string) error {
	it := bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", prefix, err)
		}
		if obj.IsDir {
			continue
		}
		if err := bucket.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return fmt.Errorf("delete %s: %w", obj.Key, err)
		}
	}
}

// OwnerClosedAt says whether the workflow run that owns a sandbox (its
// labels' workflow and run ids) has closed, and when: a run continued as
// new lives on in its successor.
func OwnerClosedAt(ctx context.Context, c client.Client, workflowID, runID string) (time.Time, bool, error) {
	return (&Activities{Client: c}).ownerClosedAt(ctx, workflowID, runID)
}
