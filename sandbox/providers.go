package sandbox

import (
	"errors"
	"fmt"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
)

// HostProviders is what one host said of its providers.
type HostProviders struct {
	// Host is the host's own queue.
	Host string `json:"host"`
	// Providers are those the host serves, with their capabilities, and
	// those its binary links but cannot serve, and why.
	Providers []provider.Availability `json:"providers,omitempty"`
	// Unreachable says the host did not answer, and Error why: its
	// worker stopped (the server lists a worker for some minutes after
	// its last poll) or is too busy to answer.
	Unreachable bool   `json:"unreachable,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Providers asks every host polling queue (DefaultQueue when empty)
// which providers it serves and which ones it links but cannot serve,
// each host on its own queue, all at once. A host that does not answer
// within a few seconds is shown unreachable: the others' answers still
// come back.
func Providers(ctx workflow.Context, queue string) ([]HostProviders, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	var hosts []string
	if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, localOptions()), acts.Hosts, queue).Get(ctx, &hosts); err != nil {
		return nil, fmt.Errorf("list the hosts: %w", temporalerr.From(err))
	}
	asked := make([]workflow.Future, len(hosts))
	for i, host := range hosts {
		o := activityOptions(host)
		o.ScheduleToStartTimeout = hostAnswerTimeout
		asked[i] = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), acts.ProviderStatuses)
	}
	out := make([]HostProviders, len(hosts))
	for i, f := range asked {
		out[i].Host = hosts[i]
		err := f.Get(ctx, &out[i].Providers)
		var timeout *temporal.TimeoutError
		switch {
		case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			out[i].Unreachable, out[i].Error = true, fmt.Sprintf("no worker took the question within %v", hostAnswerTimeout)
		case err != nil:
			out[i].Unreachable, out[i].Error = true, temporalerr.From(err).Error()
		}
	}
	return out, nil
}
