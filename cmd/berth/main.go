// Command berth is berth's command line: the front ends (berth run,
// berth sandbox, ...), which reach the Temporal server and nothing else,
// and berth dev and berth worker, which it hands to berth-host, the
// binary that links the Temporal server and the providers.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// run runs berth with arguments and says how it should exit: the
// command's own code for run and exec, exitBerth (125) when berth itself
// failed, 0 otherwise.
func run(ctx context.Context, args []string) int {
	var cf connFlags
	defer cf.flushTraces()
	root := newRootWith(&cf)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
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
		fmt.Fprintf(os.Stderr, "berth: %v\nRun '%s --help' for usage.\n", usage.err, cmd.CommandPath())
		return 2
	}
	fmt.Fprintln(os.Stderr, "berth:", oneLine(err))
	return exitBerth
}

func newRoot() *cobra.Command { return newRootWith(&connFlags{}) }

// newRootWith is berth's command, whose commands reach the server as
// cf says.
func newRootWith(cf *connFlags) *cobra.Command {
	root := &cobra.Command{
		Use:           "berth",
		Short:         "Durable sandboxes for AI agents, on Temporal",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Mistakes on the command line are usage errors: a hint, exit 2.
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cf.register(root)
	root.AddCommand(
		newHostCommand("dev", "Run an embedded Temporal server and a berth worker, in one process"),
		newHostCommand("worker", "Run a berth worker against a Temporal cluster"),
		newRun(cf), newLogs(cf), newSandbox(cf), newSnapshot(cf), newSession(cf), newChat(cf))
	root.AddCommand(newVersion(root), newProviders(cf))
	return root
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
