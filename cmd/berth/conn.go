package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/internal/connflags"
)

// connFlags are how every command reaches the Temporal server.
type connFlags struct{ connflags.Flags }

// register declares the flags on the root, for every command.
func (f *connFlags) register(cmd *cobra.Command) {
	f.Register(cmd.PersistentFlags(), client.DefaultRetryFor)
}

// options makes the Temporal client options the flags, the environment
// and the config file say.
func (f *connFlags) options() (tclient.Options, error) {
	opts, err := f.Options()
	if err != nil {
		return opts, err
	}
	opts.Logger = quietLogger()
	return opts, nil
}

// dial connects to the Temporal server, saying at once, in one line,
// when it is not there.
func (f *connFlags) dial(ctx context.Context) (*client.Client, error) {
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	c, err := connflags.Dial(ctx, opts)
	if err != nil {
		return nil, err
	}
	return client.New(c, client.WithRetryFor(f.RetryFor), client.OnWait(func(err error) {
		fmt.Fprintf(os.Stderr, "berth: the Temporal server at %s is unavailable; retrying for up to %v\n", opts.HostPort, f.RetryFor)
	})), nil
}

// quietLogger keeps the SDK's own logs off a command's output.
func quietLogger() log.Logger { return log.NewStructuredLogger(slog.New(slog.DiscardHandler)) }
