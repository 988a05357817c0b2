package berth

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"

	"github.com/berth-dev/berth/errdefs"
)

// TracerName is the instrumentation name of the spans berth's clients
// and workers make through the Temporal SDK's tracing interceptor.
const TracerName = "github.com/berth-dev/berth"

// TracingInterceptor is the Temporal SDK's OpenTelemetry tracing
// interceptor over tp: set on a client's options (client.Options.
// Interceptors) it traces the client's calls, and the workflows and
// activities of the workers made from that client, each span a child of
// the one that caused it, across processes (the span travels in
// Temporal's headers). A worker's host adds a span around each provider
// call (hostworker.HostConfig.Tracer). docs/observability.md says how
// to turn it on.
func TracingInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	if tp == nil {
		return nil, fmt.Errorf("%w: tracing without a tracer provider", errdefs.ErrBadInput)
	}
	i, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{Tracer: tp.Tracer(TracerName)})
	if err != nil {
		return nil, fmt.Errorf("tracing interceptor: %w", err)
	}
	return i, nil
}

// WithTracing traces what the client does with tp's spans (see
// TracingInterceptor). It applies to clients made by Dial: one made by
// New over a Temporal client is traced when that client was dialed with
// TracingInterceptor.
func WithTracing(tp trace.TracerProvider) Option { return func(c *Client) { c.tracer = tp } }

// Dial connects to the Temporal server opts name and returns a Client
// over it; Close closes the connection.
func Dial(ctx context.Context, opts client.Options, options ...Option) (*Client, error) {
	probe := &Client{}
	for _, o := range options {
		o(probe)
	}
	if probe.tracer != nil {
		i, err := TracingInterceptor(probe.tracer)
		if err != nil {
			return nil, err
		}
		opts.Interceptors = append(append([]interceptor.ClientInterceptor(nil), opts.Interceptors...), i)
	}
	tc, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial the Temporal server at %s: %w", opts.HostPort, err)
	}
	return New(tc, options...), nil
}

// Close closes the Temporal client underneath.
func (c *Client) Close() { c.temporal.Close() }
