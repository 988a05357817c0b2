package sandbox

import (
	"fmt"
	"strings"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
)

// Routing: a worker serves every provider it can, and polls, besides
// the shared queue and its host's, one queue per provider it serves
// (activities.ProviderQueue). A sandbox is created on its provider's
// queue, so that only a worker that can serve it takes its creation; the
// host that does then owns it, through its host queue. A provider no
// worker polls for fails creation at once, with an UnservedError. Since
// placeVersion, creation asks Route, then places the sandbox by the
// hosts' loads (place.go); createQueue serves the histories from before,
// and native wakes.

// routeVersion marks workflows that create sandboxes on their provider's
// queue; histories from before it replay creating them on the shared
// queue.
const routeVersion = "berth.route"

// UnservedError says that no worker serves the provider a sandbox was
// asked of. errors.Is(err, errdefs.ErrBadInput) holds: asking again
// fails the same way until a worker serving it starts.
type UnservedError struct {
	Provider string
	Queue    string   // the shared queue of the workers asked
	Served   []string // the providers some worker serves
}

func (e *UnservedError) Error() string {
	served := "none"
	if len(e.Served) > 0 {
		served = strings.Join(e.Served, ", ")
	}
	return fmt.Sprintf("no worker on queue %s serves provider %q (served: %s)", e.Queue, e.Provider, served)
}

func (e *UnservedError) Unwrap() error { return errdefs.ErrBadInput }

// createQueue says which task queue a sandbox of provider prov is
// created on, asking this workflow's worker (a local activity: its
// answer is kept in history for replays), which asks the server whose
// workers poll for it.
func (s *Sandbox) createQueue(ctx workflow.Context, prov string) (string, error) {
	queue := s.st.Config.Queue
	if workflow.GetVersion(ctx, routeVersion, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return queue, nil
	}
	var out activities.RouteOutput
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, localOptions()), acts.Route,
		activities.RouteInput{Queue: queue, Provider: prov}).Get(ctx, &out)
	if err != nil {
		return "", fmt.Errorf("find a worker for provider %s: %w", prov, temporalerr.From(err))
	}
	if out.Queue == "" {
		return "", &UnservedError{Provider: prov, Queue: queue, Served: out.Served}
	}
	return out.Queue, nil
}
