package hostworker

import (
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/sandbox"
)

// heartbeats gives every workflow the worker runs the heartbeat timeout
// of Options.HeartbeatTimeout (sandbox.WithHeartbeatTimeout), for the
// sandboxes it makes or reattaches.
type heartbeats struct {
	interceptor.WorkerInterceptorBase
	timeout time.Duration
}

func (h *heartbeats) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &heartbeatsInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, timeout: h.timeout}
}

type heartbeatsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	timeout time.Duration
}

func (h *heartbeatsInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	return h.Next.ExecuteWorkflow(sandbox.WithHeartbeatTimeout(ctx, h.timeout), in)
}
