package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/sandbox"
)

// ProvidersInput names the queue whose hosts are asked; empty means
// sandbox.DefaultQueue.
type ProvidersInput struct {
	Queue string `json:"queue,omitempty"`
}

// Providers says, of every host, which providers it serves, and why it
// serves the others it links not; a host that does not answer is shown
// unreachable. It is how front ends learn what they may ask for, through
// berth.Catalog (UpdateProviders); as a workflow of its own, it is
// registered under its legacy name only, for older front ends.
func Providers(ctx workflow.Context, in ProvidersInput) ([]sandbox.HostProviders, error) {
	return sandbox.Providers(ctx, in.Queue)
}
