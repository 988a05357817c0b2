package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func newLogs(cf *connFlags) *cobra.Command {
	var res *resultFlags
	cmd := &cobra.Command{
		Use:   "logs RUN-ID",
		Short: "Follow a run started with berth run --detach, and exit with its exit code",
		Long: `berth logs prints a run's output, from its start, follows it live until
the run ends, and exits with its exit code, as berth run does.

Interrupting berth logs (Ctrl-C) only stops following: the run goes on,
and berth logs RUN-ID follows it again. To cancel a run, use berth run
cancel RUN-ID, or interrupt the berth run that started it without
--detach.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			sink := res.sink()
			stdout, stderr := sink.writers()
			out, err := c.RunHandle(args[0]).Follow(ctx, stdout, stderr)
			if err != nil && ctx.Err() != nil {
				fmt.Fprintf(os.Stderr, "berth: stopped following run %s; it goes on (berth logs %s)\n", args[0], args[0])
				return exitError{130}
			}
			return sink.result("run "+args[0], args[0], out, err)
		},
	}
	res = addResultFlags(cmd.Flags())
	return cmd
}
