package activities

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Metrics receives what the activities measure: the host side of every
// sandbox operation. A host passes one in (Activities.Metrics); nil
// measures nothing. Its methods are called concurrently, on the paths
// of commands, and must not block.
type Metrics interface {
	// Created: a sandbox was made (or woken), in took.
	Created(provider, id string, took time.Duration)
	// Destroyed: a sandbox is gone.
	Destroyed(provider, id string)
	// CommandStarted and CommandEnded bracket a command run in a
	// sandbox (attached to again after a retry: each run counts);
	// CommandEnded is called once for each CommandStarted, with the
	// command's wall time as the host saw it.
	CommandStarted(provider, id string)
	CommandEnded(provider, id string, took time.Duration)
	// Snapshotted: a snapshot of kind (SnapshotUser, SnapshotCheckpoint)
	// added stored bytes to the store, in took.
	Snapshotted(provider, kind string, stored int64, took time.Duration)
	// BlobWritten and BlobRead count the bytes the activities moved to
	// and from the blob store, by what they were (BlobOutput, ...).
	BlobWritten(kind string, n int64)
	BlobRead(kind string, n int64)
}

// What the blob store's bytes are, for Metrics.BlobWritten and BlobRead.
const (
	BlobOutput   = "output"   // commands' output streams
	BlobFile     = "file"     // files read out of sandboxes, past what history carries
	BlobExport   = "export"   // parts of workspaces exported
	BlobSnapshot = "snapshot" // snapshot chunks, compressed
	BlobUpload   = "upload"   // uploads imported into sandboxes
)

// noMetrics is Metrics that measures nothing.
type noMetrics struct{}

func (noMetrics) Created(string, string, time.Duration)            {}
func (noMetrics) Destroyed(string, string)                         {}
func (noMetrics) CommandStarted(string, string)                    {}
func (noMetrics) CommandEnded(string, string, time.Duration)       {}
func (noMetrics) Snapshotted(string, string, int64, time.Duration) {}
func (noMetrics) BlobWritten(string, int64)                        {}
func (noMetrics) BlobRead(string, int64)                           {}

func (a *Activities) metrics() Metrics {
	if a == nil || a.Metrics == nil {
		return noMetrics{}
	}
	return a.Metrics
}

func noEnd(error) {}

// TracerName is the instrumentation name of the spans the activities
// make around provider calls.
const TracerName = "github.com/berth-dev/berth/activities"

// traceProvider starts a span around one provider call, a child of the
// activity's own (the SDK's tracing interceptor puts it in ctx). end
// records err, when the call failed, and ends the span.
// Without a Tracer it makes no span: a no-op one would cost each
// command its attributes and a context, for nothing.
func (a *Activities) traceProvider(ctx context.Context, op, provider, id string) (context.Context, func(err error)) {
	if a == nil || a.Tracer == nil {
		return ctx, noEnd
	}
	tp := a.Tracer
	attrs := []attribute.KeyValue{attribute.String("berth.provider", provider)}
	if id != "" {
		attrs = append(attrs, attribute.String("berth.sandbox", id))
	}
	ctx, span := tp.Tracer(TracerName).Start(ctx, "provider."+op,
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
