// Command berth is berth's one binary: an embedded Temporal server with a
// worker (berth dev), a worker for a real cluster (berth worker), and the
// front ends (berth run, ...).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/provider/linux"
)

func main() {
	linux.Main() // when started as a sandbox's daemon, this never returns
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRoot().ExecuteContext(ctx)
	var exit exitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.code)
	case err != nil:
		fmt.Fprintln(os.Stderr, "berth:", err)
		os.Exit(1)
	}
}

// exitError ends berth with a code and nothing more to say: the command
// it ran said it already.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "berth",
		Short:         "Durable sandboxes for AI agents, on Temporal",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDev(), newWorker(), newRun(), newLogs(), newSandbox(), newSnapshot())
	return root
}

// newLogger makes berth's short, human logs.
func newLogger(verbose bool) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // the terminal, or the journal, has the time
			}
			return a
		},
	}))
}
