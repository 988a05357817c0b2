package main

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
)

// shellTimeout bounds a shell's session when --timeout names no other.
const shellTimeout = 24 * time.Hour

// defaultShell is what berth sandbox shell runs without a command: the
// sandbox's bash if it has one, else its sh.
const defaultShell = `command -v bash >/dev/null 2>&1 && exec bash -l || exec sh -l`

func newSandboxShell(cf *connFlags) *cobra.Command {
	var (
		req  berth.ExecOptions
		argv []string
		env  []string
	)
	cmd := &cobra.Command{
		Use:   "shell ID [-- CMD [ARGS...]]",
		Short: "Open an interactive shell (or run a command) on a terminal in a sandbox",
		Long: `berth sandbox shell runs the sandbox's shell (bash if it has one, else sh),
or CMD, on a terminal in the sandbox, with berth's terminal in raw mode:
every key, ^C and ^D among them, goes to the sandbox's terminal, and a
resize of the window resizes it. berth exits with the command's exit code.

Keys and output travel through the Temporal server like every other
operation. A server restart under it is a pause: the shell waits for the
server (--retry-for) and goes on. A shell lost with its sandbox (its host
gone) is said in one line, and berth exits 125.

ID may be a coding agent session's (s1, s2, ...): the shell runs in the
session's sandbox, between turns or during one, and never enters its
conversation; a paused session's sandbox wakes for it.`,
		Args:              usageArgs(cobra.MinimumNArgs(1)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			if len(args) > 1 {
				argv = args[1:]
			} else {
				req.Shell = defaultShell
			}
			var err error
			if req.Env, err = parseEnv(env); err != nil {
				return usageError{err}
			}
			if !isTerminal(int(os.Stdin.Fd())) {
				fmt.Fprintln(os.Stderr, "berth: standard input is not a terminal: its input goes to the shell as it is")
			}
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			return runOnTerminal(ctx, c, id, argv, req, true)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&env, "env", nil, "K=V: set an environment variable (repeatable)")
	f.StringVar(&req.Dir, "dir", "", "working directory, a workspace path")
	f.DurationVar(&req.Timeout, "timeout", shellTimeout, "end the session after this long")
	return cmd
}
