package sandbox

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
)

// Providers asks a worker polling queue (DefaultQueue when empty) which
// providers it serves, with their capabilities, and which ones it links
// but cannot serve, and why.
func Providers(ctx workflow.Context, queue string) ([]provider.Status, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	o := activityOptions(queue, 0)
	o.ScheduleToStartTimeout = 0
	return call[[]provider.Status](ctx, o, acts.ProviderStatuses, nil)
}
