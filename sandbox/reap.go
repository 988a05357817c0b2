package sandbox

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// ReapReport says what a reaping destroyed.
type ReapReport struct {
	Sandboxes   []string `json:"sandboxes,omitempty"` // destroyed
	Checkpoints int      `json:"checkpoints"`         // deleted
	Chunks      int      `json:"chunks"`              // snapshot chunks no longer referred to, removed
	Transfers   int      `json:"transfers"`           // uploads and exports left by front ends, removed
	Outputs     int      `json:"outputs"`             // sandboxes whose stored outputs were removed
}

// Reap destroys the sandboxes of the workers polling queue (a host's
// queue, for host-bound providers) whose owner workflow has closed or
// whose hard lifetime has passed, then the checkpoints of closed owners
// and the snapshot chunks nothing refers to, and the uploads and exports
// that front ends left in the blob store. It is what the reaper's
// schedule runs; a sandbox without owner labels is only reaped at the
// end of its lifetime.
//
// What sandboxes stored in the blob store (their commands' outputs) goes
// once their owner has been closed for outputRetention (zero: a day).
func Reap(ctx workflow.Context, queue string, outputRetention time.Duration) (ReapReport, error) {
	var report ReapReport
	// Each sweep after the first goes on when an earlier one failed
	// (one store out of reach must not keep the others from their
	// sweeps); histories from before stopped at the first failure.
	each := workflow.GetVersion(ctx, reapEachVersion, workflow.DefaultVersion, 1) == 1
	err := reapSandboxes(ctx, queue, &report)
	if err != nil && !each {
		return report, err
	}
	errs := []error{err}
	snaps, err := call[activities.ReapSnapshotsOutput](ctx, activityOptions(queue),
		acts.ReapSnapshots, activities.ReapSnapshotsInput{LabelWorkflowID: LabelWorkflowID, LabelRunID: LabelRunID})
	if err != nil {
		if !each {
			return report, fmt.Errorf("reap checkpoints: %w", err)
		}
		errs = append(errs, fmt.Errorf("reap checkpoints: %w", err))
	}
	report.Checkpoints, report.Chunks = snaps.Checkpoints, snaps.Chunks
	if report.Transfers, err = call[int](ctx, activityOptions(queue), acts.SweepTransfers, time.Duration(0)); err != nil {
		if !each {
			return report, fmt.Errorf("sweep transfers: %w", err)
		}
		errs = append(errs, fmt.Errorf("sweep transfers: %w", err))
	}
	report.Outputs, err = call[int](ctx, activityOptions(queue), acts.SweepOutputs, activities.SweepOutputsInput{
		LabelWorkflowID: LabelWorkflowID, LabelRunID: LabelRunID, Retention: outputRetention})
	if err != nil {
		errs = append(errs, fmt.Errorf("sweep outputs: %w", err))
	}
	return report, errors.Join(errs...)
}

// reapEachVersion marks the histories whose reaping makes every sweep
// whatever an earlier one did.
const reapEachVersion = "berth.reap-each"

// reapSandboxes destroys the sandboxes of queue's workers whose owner
// has closed or whose lifetime has passed, adding them to report.
func reapSandboxes(ctx workflow.Context, queue string, report *ReapReport) error {
	infos, err := call[[]provider.Info](ctx, activityOptions(queue), acts.List, activities.ListInput{})
	if err != nil {
		return fmt.Errorf("list sandboxes: %w", err)
	}
	var owners []activities.Owner
	var owned []int // indexes in infos of the sandboxes owners describes
	for i, info := range infos {
		if id := info.Labels[LabelWorkflowID]; id != "" {
			owners = append(owners, activities.Owner{WorkflowID: id, RunID: info.Labels[LabelRunID],
				Sandbox: info.ID, Base: info.Labels[LabelSandbox], Provider: info.Provider})
			owned = append(owned, i)
		}
	}
	doomed := make([]bool, len(infos))
	if len(owners) > 0 {
		closed, err := call[[]bool](ctx, activityOptions(queue), acts.OwnersClosed, owners)
		if err != nil {
			return fmt.Errorf("check owners: %w", err)
		}
		for j, i := range owned {
			doomed[i] = j < len(closed) && closed[j]
		}
	}
	now := workflow.Now(ctx)
	for i, info := range infos {
		if !doomed[i] && (info.ExpiresAt.IsZero() || now.Before(info.ExpiresAt)) {
			reaped(ctx, info.Provider, ReapKept)
			continue
		}
		ref := refs.Sandbox{Provider: info.Provider, ID: info.ID, Queue: queue}
		if _, err := call[struct{}](ctx, lifecycleOptions(queue, heartbeatTimeout(ctx)), acts.Destroy, ref); err != nil {
			workflow.GetLogger(ctx).Warn("reap sandbox", "sandbox", info.ID, "error", err)
			reaped(ctx, info.Provider, ReapFailed)
			continue
		}
		reaped(ctx, info.Provider, ReapDestroyed)
		report.Sandboxes = append(report.Sandboxes, info.ID)
	}
	return nil
}

// MetricReaped counts what reapers did with each sandbox they looked at,
// by provider and action (ReapKept, ReapDestroyed, ReapFailed), through
// the worker's metrics handler (client.Options.MetricsHandler), which
// does not count again on replay. In Prometheus' text format it is
// berth_reaper_sandboxes_total.
const MetricReaped = "berth_reaper_sandboxes"

// Reaper actions, the action label of MetricReaped.
const (
	ReapKept      = "kept"      // its owner runs and its lifetime has not passed
	ReapDestroyed = "destroyed" // its owner closed, or its lifetime passed
	ReapFailed    = "failed"    // doomed, but its destruction failed: the next pass tries again
)

func reaped(ctx workflow.Context, provider, action string) {
	workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"provider": provider, "action": action}).
		Counter(MetricReaped).Inc(1)
}
