package main

import (
	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/tui"
)

func newChat(cf *connFlags) *cobra.Command {
	sf := &sessionFlags{cf: cf}
	var (
		newReq session.CreateRequest
		inline bool
	)
	cmd := &cobra.Command{
		Use:   "chat [SESSION]",
		Short: "Talk with the coding agent, in a terminal UI",
		Long: `berth chat opens the coding agent's sessions in a terminal UI: the list of
sessions (n starts one), and a session's conversation, its tool calls and
their output shown as they happen. In a session: /fork [title],
/switch <provider>, /title <name>, /approve and /deny (with --approvals),
/done keep|destroy, /sessions, /help, /quit. Quitting leaves the session
running; opening it again shows it where it is.`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, done, err := sf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			opts := tui.Options{New: newReq, AltScreen: !inline}
			if len(args) == 1 {
				opts.Session = args[0]
			}
			return tui.Run(cmd.Context(), s, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&sf.manager, "manager", session.DefaultManagerID, "the session manager's workflow id")
	f.StringVar(&newReq.Provider, "provider", "", "where new sessions' sandboxes live (default linux)")
	f.BoolVar(&newReq.Approvals, "approvals", false, "new sessions' shell commands wait for /approve")
	f.BoolVar(&inline, "inline", false, "draw in the terminal's main screen, not its alternate screen")
	return cmd
}
