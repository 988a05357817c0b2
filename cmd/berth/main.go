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
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/provider/linux"
)

func main() {
	linux.Main() // when started as a sandbox's daemon, this never returns
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// run runs berth with arguments and says how it should exit: the
// command's own code for run and exec, exitBerth (125) when berth itself
// failed, 0 otherwise.
func run(ctx context.Context, args []string) int {
	root := newRoot()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var (
		exit  exitError
		usage usageError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.code
	case errors.As(err, &usage) || strings.HasPrefix(err.Error(), "unknown command"):
		if !errors.As(err, &usage) {
			usage.err = err
		}
		fmt.Fprintf(os.Stderr, "berth: %v\nRun 'berth --help' for usage.\n", usage.err)
		return 2
	}
	fmt.Fprintln(os.Stderr, "berth:", oneLine(err))
	return exitBerth
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "berth",
		Short:         "Durable sandboxes for AI agents, on Temporal",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Mistakes on the command line are usage errors: a hint, exit 2.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	var cf connFlags
	cf.register(root)
	root.AddCommand(newDev(), newWorker(&cf), newRun(&cf), newLogs(&cf), newSandbox(&cf), newSnapshot(&cf))
	root.AddCommand(newVersion(root))
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

// usageArgs makes an argument check's failure a usage error.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
		}
		return nil
	}
}
