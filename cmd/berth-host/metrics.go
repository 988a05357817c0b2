package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/otlpenv"
)

// observeHelp says how a host is observed, for the --help of dev and
// worker.
const observeHelp = `Metrics: with --metrics-address, the Temporal SDK's and berth's metrics
(sandboxes by state, create and exec latency, held and active seconds,
snapshots, blob store bytes, reaper actions) are served in Prometheus'
text format at http://ADDRESS/metrics. Traces: with
OTEL_EXPORTER_OTLP_ENDPOINT set (and the other OTEL_* variables as
OpenTelemetry defines them), workflows, activities and provider calls
are traced, and their spans exported by OTLP. docs/observability.md
lists the metrics and the queries of a dashboard.`

// observeFlags are how a host is observed: --metrics-address, and the
// OTEL_* environment for traces.
type observeFlags struct {
	address string
	pprof   bool
}

func (f *observeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.address, "metrics-address", "",
		"serve the Temporal SDK's and berth's metrics in Prometheus' text format at http://ADDRESS/metrics (HOST:PORT; :0 picks a port); empty for none")
	cmd.Flags().BoolVar(&f.pprof, "pprof", false, "with --metrics-address, serve Go's profiles there too, at /debug/pprof/ (go tool pprof http://ADDRESS/debug/pprof/heap)")
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := checkMetricsAddress(f.address); err != nil {
			return usageError{err}
		}
		if f.pprof && f.address == "" {
			return usageError{fmt.Errorf("--pprof serves on --metrics-address: give one")}
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

// checkMetricsAddress refuses an address that cannot be listened on
// before anything starts.
func checkMetricsAddress(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-address %q: want HOST:PORT (127.0.0.1:9090, :9090)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--metrics-address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

// observing is what a host's observation needs while it runs.
type observing struct {
	ln          net.Listener          // the metrics' listener; nil for none
	pprof       bool                  // serve net/http/pprof beside the metrics
	telemetry   *hostworker.Telemetry // nil without metrics
	tracer      trace.TracerProvider  // nil without traces
	interceptor interceptor.Interceptor
	stopTrace   func(context.Context) error
}

// start opens the metrics' listener, first, so that an address taken
// fails before anything else starts, and the tracer provider the
// environment asks for.
func (f *observeFlags) start(ctx context.Context, service string, log *slog.Logger) (*observing, error) {
	o := &observing{stopTrace: func(context.Context) error { return nil }}
	tp, stop, err := otlpenv.TracerProvider(ctx, service)
	if err != nil {
		return nil, err
	}
	if tp != nil {
		i, err := berth.TracingInterceptor(tp)
		if err != nil {
			stop(ctx)
			return nil, err
		}
		o.tracer, o.interceptor, o.stopTrace = tp, i, stop
		log.Info("tracing", "exporter", "otlp")
	}
	if f.address == "" {
		return o, nil
	}
	o.pprof = f.pprof
	if o.ln, err = net.Listen("tcp", f.address); err != nil {
		o.close()
		return nil, fmt.Errorf("--metrics-address: %w", err)
	}
	if o.telemetry, err = hostworker.NewTelemetry(log); err != nil {
		o.close()
		return nil, err
	}
	return o, nil
}

// apply sets the client's options to match: the SDK's metrics handler,
// and its tracing interceptor, which the workers made from the client
// use too.
func (o *observing) apply(opts *client.Options) {
	if o.telemetry != nil {
		opts.MetricsHandler = o.telemetry.SDKMetrics()
	}
	if o.interceptor != nil {
		opts.Interceptors = append(opts.Interceptors, o.interceptor)
	}
}

// serve serves h's metrics until close.
func (o *observing) serve(h *hostworker.Host, log *slog.Logger) {
	if o.ln == nil {
		return
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h.MetricsHandler())
	if o.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(o.ln)
	log.Info("metrics", "url", "http://"+o.ln.Addr().String()+"/metrics")
}

// close stops serving metrics and flushes the spans not yet exported.
func (o *observing) close() {
	if o.ln != nil {
		o.ln.Close()
	}
	if o.telemetry != nil {
		o.telemetry.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o.stopTrace(ctx)
}
