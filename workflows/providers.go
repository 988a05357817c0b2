package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// ProvidersInput names the queue whose workers are asked; empty means
// sandbox.DefaultQueue.
type ProvidersInput struct {
	Queue string `json:"queue,omitempty"`
}

// Providers says which providers a worker serves, and why it serves
// the others it links not: how front ends learn what they may ask for.
func Providers(ctx workflow.Context, in ProvidersInput) ([]provider.Status, error) {
	return sandbox.Providers(ctx, in.Queue)
}
