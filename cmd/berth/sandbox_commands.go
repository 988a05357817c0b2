package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/provider"
)

// followCommand follows a command of a sandbox to its end, printing its
// output. The first interrupt (ctx done) forwards SIGINT to the command,
// which goes on, and its output with it; a second detaches: the command
// goes on in the sandbox, and berth says how to attach to it again and
// exits 130.
func followCommand(ctx context.Context, cmd *berth.Command, sink *sink) error {
	followCtx, stopFollowing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopFollowing()
	var detached atomic.Bool
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		select {
		case <-ctx.Done():
		case <-followCtx.Done():
			return
		}
		// Listen for the second interrupt before forwarding the first,
		// not to miss it.
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		sctx, cancel := context.WithTimeout(followCtx, 10*time.Second)
		if err := cmd.Signal(sctx, "INT"); err != nil && followCtx.Err() == nil {
			// It may have just ended; its result says so.
			fmt.Fprintf(os.Stderr, "berth: could not interrupt %s: %s\n", cmd.ID, oneLine(err))
		}
		cancel()
		select {
		case <-followCtx.Done():
			return
		case <-again:
		}
		detached.Store(true)
		stopFollowing()
	}()
	stdout, stderr := sink.writers()
	out, err := cmd.Follow(followCtx, stdout, stderr)
	stopFollowing()
	<-watching
	if detached.Load() && err != nil {
		fmt.Fprintf(os.Stderr, "detached: %s goes on; berth sandbox attach %s %s\n", cmd.ID, cmd.Sandbox, cmd.ID)
		return exitError{130}
	}
	return sink.result("sandbox "+cmd.Sandbox, cmd.Sandbox, out, err)
}

func newSandboxAttach(cf *connFlags) *cobra.Command {
	var res *resultFlags
	cmd := &cobra.Command{
		Use:   "attach ID CMD-ID",
		Short: "Follow a command of a sandbox: its output from the start, then live, and its exit code",
		Long: `berth sandbox attach follows a command that berth sandbox exec started
(CMD-ID, as exec --detach prints it and inspect lists it): it prints the
command's output from its start, then as it is produced, and exits with
its exit code, as exec does. A command that has ended is among the last
64 a sandbox remembers.

Ctrl-C forwards SIGINT to the command; a second Ctrl-C detaches, leaving
the command running, and exits 130.`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeCommands(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, cmdID := args[0], args[1]
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			command, err := c.Sandboxes().Handle(sandboxWorkflow(id)).Attach(ctx, cmdID)
			if err != nil {
				return updateErr(id, err)
			}
			return followCommand(ctx, command, res.sink())
		},
	}
	res = addResultFlags(cmd.Flags())
	return cmd
}

func newSandboxKill(cf *connFlags) *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   "kill ID CMD-ID [--signal S]",
		Short: "Send a signal to a running command of a sandbox (default KILL)",
		Long: `berth sandbox kill sends a signal to a running command (CMD-ID, as exec
--detach prints it and inspect lists it) and to every process it started
that stayed in its process group or session. Signals: ` + strings.Join(provider.Signals, " ") + `,
with or without SIG.`,
		Args:              usageArgs(cobra.ExactArgs(2)),
		ValidArgsFunction: completeCommands(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id, cmdID := args[0], args[1]
			if _, err := provider.ParseSignal(sig); err != nil {
				return usageError{fmt.Errorf("--signal: %w", err)}
			}
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			return updateErr(id, c.Sandboxes().Handle(sandboxWorkflow(id)).Signal(ctx, cmdID, sig))
		},
	}
	cmd.Flags().StringVarP(&sig, "signal", "s", "KILL", "the signal to send")
	_ = cmd.RegisterFlagCompletionFunc("signal", cobra.FixedCompletions(provider.Signals, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// completeCommands completes a sandbox's id, then the ids of its running
// commands.
func completeCommands(cf *connFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) != 1 {
			return completeSandboxes(cf)(cmd, args, "")
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, completionTimeout)
		defer cancel()
		c, err := cf.dial(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer c.Temporal().Close()
		st, err := c.Sandboxes().Handle(args[0]).Status(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []cobra.Completion
		ids = append(ids, st.Running...)
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}
