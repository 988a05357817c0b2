package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newLogs() *cobra.Command {
	var address, namespace, dataDir string
	cmd := &cobra.Command{
		Use:   "logs RUN-ID",
		Short: "Follow a run started with berth run --detach, and exit with its exit code",
		Long: `berth logs prints a run's output, from its start, follows it live until
the run ends, and exits with its exit code, as berth run does.

Interrupting berth logs (Ctrl-C) only stops following: the run goes on,
and berth logs RUN-ID follows it again. To cancel a run, interrupt the
berth run that started it without --detach.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := dial(address, namespace)
			if err != nil {
				return err
			}
			defer c.Close()
			wr := c.GetWorkflow(ctx, args[0], "")
			out, err := follow(ctx, c, wr, dataDir)
			if err != nil && ctx.Err() != nil {
				fmt.Fprintf(os.Stderr, "berth: stopped following run %s; it goes on (berth logs %s)\n", args[0], args[0])
				return exitError{130}
			}
			if err != nil {
				return fmt.Errorf("run %s: %w", args[0], err)
			}
			return runExit(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", "", "Temporal frontend host:port (default $TEMPORAL_ADDRESS or 127.0.0.1:7233)")
	f.StringVar(&namespace, "namespace", "", "Temporal namespace (default $TEMPORAL_NAMESPACE or default)")
	f.StringVar(&dataDir, "data-dir", defaultDataDir(), "berth dev's data directory, where outputs are stored")
	return cmd
}
