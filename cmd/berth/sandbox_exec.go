package main

import (
	"fmt"
	"io"
	"os"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
)

func newSandboxExec(cf *connFlags) *cobra.Command {
	var (
		req    berth.ExecOptions
		argv   []string
		env    []string
		stdin  bool
		tty    bool
		maxOut string
		detach bool
		res    *resultFlags
	)
	cmd := &cobra.Command{
		Use:   "exec ID [flags] -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, print its output live, and exit with its exit code",
		Long: `berth sandbox exec runs a command in a sandbox, prints its output as it
is produced, and exits with its exit code (128+n for a signal; 124, 127
and 137 when berth ended it: timeout, not found, out of memory; 125 when
berth itself failed).

A server restart under it is a pause: it waits for the server (--retry-for)
and the command runs once.

Ctrl-C forwards SIGINT to the command, whose output goes on; a second
Ctrl-C detaches, leaving the command running, and exits 130. --detach
prints the command's id and returns: berth sandbox attach follows it,
berth sandbox kill signals it.

ID may be a coding agent session's (s1, s2, ...): the command runs in
the session's sandbox, between turns or during one, and never enters
its conversation; a paused session's sandbox wakes for it.

With -t the command runs on a terminal (its output is stdout alone), the
size of berth's; with -it berth's terminal is in raw mode and every key
goes to it, as berth sandbox shell does.`,
		Args:              usageArgs(cobra.MinimumNArgs(2)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			argv = args[1:]
			var err error
			if req.Env, err = parseEnv(env); err != nil {
				return usageError{err}
			}
			if maxOut != "" {
				if req.MaxOutput, err = parseBytes(maxOut); err != nil {
					return usageError{fmt.Errorf("--max-output: %w", err)}
				}
			}
			if tty {
				if *res.format != formatText {
					return usageError{fmt.Errorf("-t: a terminal's output is text: -o is for commands without one")}
				}
				if req.Timeout == 0 {
					req.Timeout = shellTimeout
				}
				c, err := cf.dial(ctx)
				if err != nil {
					return err
				}
				defer c.Temporal().Close()
				return runOnTerminal(ctx, c, id, argv, req, stdin)
			}
			if stdin {
				if req.Stdin, err = readStdin(os.Stdin); err != nil {
					return err
				}
			}
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			command, err := c.Sandboxes().Handle(sandboxWorkflow(id)).Start(ctx, argv, req)
			switch {
			case temporalerr.WorkflowNotFound(err):
				return updateErr(id, err)
			case err != nil && ctx.Err() != nil:
				fmt.Fprintf(os.Stderr, "berth: sandbox %s: interrupted before the command was accepted\n", id)
				return exitError{130}
			case err != nil:
				return res.sink().result("sandbox "+id, id, nil, err)
			case detach:
				_, err := fmt.Println(command.ID)
				return err
			}
			return followCommand(ctx, command, res.sink())
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&env, "env", nil, "K=V: set an environment variable (repeatable)")
	f.StringVar(&req.Dir, "dir", "", "working directory, a workspace path")
	f.DurationVar(&req.Timeout, "timeout", 0, "end the command after this long (default "+defaultTimeout+")")
	f.BoolVarP(&detach, "detach", "d", false, "print the command's id and return, leaving it running")
	f.BoolVarP(&stdin, "interactive", "i", false, "send standard input to the command (at most 2 MiB; with -t, as it is typed)")
	f.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal (with -i: interactive, berth's terminal in raw mode)")
	f.StringVar(&maxOut, "max-output", "", "store at most this much of each output stream, its start and its end (default 256Mi)")
	res = addResultFlags(f)
	return cmd
}

// maxStdin bounds the standard input a command gets: it travels through
// workflow history.
const maxStdin = 2 << 20

func readStdin(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
	if err != nil {
		return nil, fmt.Errorf("read standard input: %w", err)
	}
	if len(b) > maxStdin {
		return nil, usageError{fmt.Errorf("-i: more than %d bytes of standard input; copy a file in with berth sandbox cp instead", maxStdin)}
	}
	return b, nil
}
