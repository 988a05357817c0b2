package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/internal/connflags"
	"github.com/berth-dev/berth/internal/otlpenv"
)

// connFlags are how every command reaches the Temporal server.
type connFlags struct {
	connflags.Flags
	// stopTraces flushes the spans of the calls traced (tracing is on
	// when the OTEL_* environment names an OTLP endpoint); nil when
	// none were.
	stopTraces func(context.Context) error
	tracer     trace.TracerProvider
}

// flushTraces sends the spans not yet exported, for a few seconds at
// most: a command's calls are traced in batches.
func (f *connFlags) flushTraces() {
	if f.stopTraces == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.stopTraces(ctx)
	f.stopTraces = nil
}

// register declares the flags on the root, for every command.
func (f *connFlags) register(cmd *cobra.Command) {
	f.Register(cmd.PersistentFlags(), berth.DefaultRetryFor)
}

// options makes the Temporal client options the flags, the environment
// and the config file say.
func (f *connFlags) options() (client.Options, error) {
	opts, err := f.Options()
	if err != nil {
		return opts, err
	}
	opts.Logger = quietLogger()
	if f.tracer == nil {
		tp, stop, err := otlpenv.TracerProvider(context.Background(), "berth")
		if err != nil {
			return opts, err
		}
		if tp == nil {
			return opts, nil
		}
		f.tracer, f.stopTraces = tp, stop
	}
	i, err := berth.TracingInterceptor(f.tracer)
	if err != nil {
		return opts, err
	}
	opts.Interceptors = append(opts.Interceptors, i)
	return opts, nil
}

// dial connects to the Temporal server, saying at once, in one line,
// when it is not there.
func (f *connFlags) dial(ctx context.Context) (*berth.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	c, err := connflags.Dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	var told outageNotice
	return berth.New(c, berth.WithRetryFor(f.RetryFor), berth.OnWait(func(err error) {
		told.tell(f.RetryFor, func() {
			fmt.Fprintf(os.Stderr, "berth: the Temporal server at %s is unavailable; retrying for up to %v\n", opts.HostPort, f.RetryFor)
		})
	})), nil
}

// outageNotice tells of an outage once, however many of a command's
// calls (a copy's parallel parts, an output's follower beside its
// result) wait through it: a call that waits within retryFor of the
// last notice is in the same outage.
type outageNotice struct {
	mu   sync.Mutex
	last time.Time
}

func (n *outageNotice) tell(retryFor time.Duration, say func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.last.IsZero() && time.Since(n.last) < max(retryFor, time.Second) {
		return
	}
	n.last = time.Now()
	say()
}

// quietLogger keeps the SDK's own logs off a command's output.
func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }
