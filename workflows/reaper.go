package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/sandbox"
)

// ReaperInput names the queue of the host whose sandboxes a reaper
// looks after, and how.
type ReaperInput struct {
	Queue string `json:"queue"`
	// OutputRetention is how long sandboxes' outputs outlive their
	// owner; zero means transfer.DefaultOutputRetention.
	OutputRetention time.Duration `json:"output_retention,omitempty"`
	// Every is how long the reaper waits between passes; zero means
	// DefaultReapEvery.
	Every time.Duration `json:"every,omitempty"`
	// ContinueAfter continues the reaper as new after this many passes;
	// zero means reaperPasses, or sooner when the server suggests it.
	ContinueAfter int `json:"continue_after,omitempty"`
}

// DefaultReapEvery is how long a reaper waits between passes by default.
const DefaultReapEvery = 5 * time.Minute

// reaperPasses is how many passes a reaper makes before it continues
// as new: a pass is some 20 events, and a day of passes every 5 minutes
// would be 6,000.
const reaperPasses = 100

// The reaper's Signal and Query. SignalReap carries a ReaperInput: the
// settings from now on, and a pass at once. A host sends it with its
// start (SignalWithStart), so that a host restarted with other settings
// changes the reaper already running, and reaps at once what was left
// while it was down.
const (
	SignalReap  = "berth.reaper.reap"
	QueryReaper = "berth.reaper" // -> ReaperStatus
)

// ReaperID is the workflow id of the reaper of a host's queue: one per
// host, however many times it starts.
func ReaperID(hostQueue string) string { return "berth-reaper-" + hostQueue }

// ReaperStatus is what a reaper has done in its current run.
type ReaperStatus struct {
	Passes int                `json:"passes"`
	Last   sandbox.ReapReport `json:"last"`
	LastAt time.Time          `json:"last_at,omitzero"`
	// Error is why the last pass failed, if it did; the next pass
	// tries again.
	Error string `json:"error,omitempty"`
}

// HostReaper is a host's reaper (berth.Reaper): it makes a pass at its
// start, at every SignalReap, and every in.Every, destroying the
// sandboxes whose owner is gone or whose lifetime has passed
// (sandbox.Reap), and continues as new now and then. It runs for as
// long as its host does, and longer: one workflow, not one per pass.
// A pass that fails is logged, kept in its status, and tried again at
// the next.
func HostReaper(ctx workflow.Context, in ReaperInput) error {
	settings := workflow.GetSignalChannel(ctx, SignalReap)
	var st ReaperStatus
	if err := workflow.SetQueryHandler(ctx, QueryReaper, func() (ReaperStatus, error) { return st, nil }); err != nil {
		return err
	}
	// The latest settings sent win; what was sent is never left behind
	// in a run that ends.
	takeSettings := func() {
		var next ReaperInput
		for settings.ReceiveAsync(&next) {
			in = next
		}
	}
	for {
		takeSettings()
		in.Every = durationOr(in.Every, DefaultReapEvery)
		keepDetails(ctx, ReaperSummary(in))
		report, err := sandbox.Reap(ctx, in.Queue, in.OutputRetention)
		st.Passes++
		st.Last, st.LastAt, st.Error = report, workflow.Now(ctx), ""
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			st.Error = err.Error()
			workflow.GetLogger(ctx).Warn("reap", "queue", in.Queue, "error", err)
		}
		limit := in.ContinueAfter
		if limit <= 0 {
			limit = reaperPasses
		}
		if st.Passes >= limit || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			takeSettings()
			return workflow.NewContinueAsNewError(ctx, ReaperWorkflowName, in)
		}
		wait, stopWaiting := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(workflow.NewTimer(wait, in.Every), func(workflow.Future) {})
		sel.AddReceive(settings, func(workflow.ReceiveChannel, bool) {}) // taken at the top
		sel.Select(ctx)
		stopWaiting()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// Reaper is the reaper as it was before berth.Reaper: one pass, run by
// a schedule. It is registered under its legacy name "Reaper" for the
// passes a schedule started before its host was upgraded. (Its Go name
// must stay Reaper: the SDK takes a type name that is a registered
// function's Go name for that function.)
func Reaper(ctx workflow.Context, in ReaperInput) (sandbox.ReapReport, error) {
	return sandbox.Reap(ctx, in.Queue, in.OutputRetention)
}
