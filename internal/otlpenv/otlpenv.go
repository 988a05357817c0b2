// Package otlpenv makes the OpenTelemetry tracer provider that the
// standard OTEL_* environment asks for, exporting spans by OTLP: berth's
// commands trace only when OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set. The exporters read the
// rest of the standard settings themselves (headers, TLS, timeouts,
// compression); the SDK reads OTEL_TRACES_SAMPLER and
// OTEL_RESOURCE_ATTRIBUTES.
package otlpenv

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerProvider returns the tracer provider the environment asks for, named
// service unless OTEL_SERVICE_NAME names it, and the function that
// flushes and stops it (call it before the process exits: spans are
// sent in batches). With no OTLP endpoint set, or OTEL_SDK_DISABLED=true,
// or OTEL_TRACES_EXPORTER=none, it returns a nil provider: no tracing.
func TracerProvider(ctx context.Context, service string) (trace.TracerProvider, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	// The exporters read the process's environment themselves: so does
	// this, that the two agree.
	get := func(k string) string { return strings.TrimSpace(os.Getenv(k)) }
	if get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, none, nil
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") || get("OTEL_TRACES_EXPORTER") == "none" {
		return nil, none, nil
	}
	if e := get("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return nil, none, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: berth exports traces by otlp only (or none)", e)
	}
	protocol := get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch protocol {
	case "", "http/protobuf": // the specification's default
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, none, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, none, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	if name := get("OTEL_SERVICE_NAME"); name != "" {
		service = name
	}
	res, err := resource.Merge(resource.Default(),
		resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service)))
	if err != nil {
		res = resource.Default() // schema versions that differ: the defaults still name the process
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}
