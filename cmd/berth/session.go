package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/termtext"
	"github.com/berth-dev/berth/session"
)

// sessionFlags are what every session command shares: the connection
// and the manager.
type sessionFlags struct {
	cf      *connFlags
	manager string
}

// runE makes a command's RunE from what it does with the sessions.
func (f *sessionFlags) runE(do func(cmd *cobra.Command, args []string, s *berth.Sessions) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		s, done, err := f.dial(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		return do(cmd, args, s)
	}
}

// dial connects, and returns the sessions and a function to close.
func (f *sessionFlags) dial(ctx context.Context) (*berth.Sessions, func(), error) {
	c, err := f.cf.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c.Sessions(f.manager), c.Temporal().Close, nil
}

func newSession(cf *connFlags) *cobra.Command {
	sf := &sessionFlags{cf: cf}
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Create, drive and manage the coding agent's sessions",
		Long: `A session is a conversation with the coding agent, which runs its tools in a
sandbox of its own; it lasts until it is removed, at no cost while it
waits. Sessions are kept by a manager workflow; berth chat is their
terminal UI, and these commands are for scripts.`,
	}
	cmd.PersistentFlags().StringVar(&sf.manager, "manager", session.DefaultManagerID, "the session manager's workflow id")
	cmd.AddCommand(newSessionLs(sf), newSessionNew(sf))
	// The others name a session first.
	for _, sub := range []*cobra.Command{newSessionSend(sf), newSessionShow(sf),
		newSessionFork(sf), newSessionSwitch(sf), newSessionRename(sf), newSessionRm(sf),
		newSessionApprove(sf, "approve", true), newSessionApprove(sf, "deny", false),
		newSessionPause(sf, "pause"), newSessionPause(sf, "resume")} {
		sub.ValidArgsFunction = completeSessions(cf, &sf.manager)
		cmd.AddCommand(sub)
	}
	return cmd
}

func newSessionLs(sf *sessionFlags) *cobra.Command {
	l := listing[session.Info]{
		short:   "List the sessions",
		allHelp: "list ended sessions too",
		list: func(ctx context.Context, c *berth.Client, all bool) ([]session.Info, error) {
			if all {
				return c.Sessions(sf.manager).ListAll(ctx)
			}
			return c.Sessions(sf.manager).List(ctx)
		},
		id:     func(in session.Info) string { return in.ID },
		header: "ID\tTITLE\tPROVIDER\tSTATUS\tCREATED\tFORK OF",
		line: func(in session.Info) string {
			status := in.Status
			if in.Error != "" {
				status += ": " + in.Error
			}
			return strings.Join([]string{in.ID, in.Title, in.Provider, status,
				in.Created.Local().Format(time.DateTime), dash(in.ForkOf)}, "\t")
		},
	}
	return l.command(sf.cf)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newSessionNew(sf *sessionFlags) *cobra.Command {
	var (
		req                 session.CreateRequest
		network             networkFlags
		out                 *format
		noIdle, noHibernate bool
	)
	cmd := &cobra.Command{
		Use:   "new",
		Short: "Start a session and print its id",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if network.changed() {
				n, err := network.policy()
				if err != nil {
					return usageError{err}
				}
				req.Network = &n
			}
			if noIdle {
				req.IdleTimeout = berth.Never
			}
			if noHibernate {
				req.HibernateAfter = berth.Never
			}
			// Bad settings fail before anything is dialled or started.
			policy := berth.CheckpointPolicy{Every: req.CheckpointEvery, Interval: req.CheckpointInterval, Idle: req.CheckpointIdle}
			if err := policy.Validate(); err != nil {
				return err
			}
			s, done, err := sf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			info, err := s.Create(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printInfo(os.Stdout, *out, info)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Title, "title", "", "the session's title (default: its id)")
	f.StringVar(&req.Provider, "provider", "", "where its sandbox lives (default linux; berth providers lists them)")
	f.StringVar(&req.Image, "image", "", "its sandbox's image (default: the provider's)")
	network.register(f)
	f.BoolVar(&req.Approvals, "approvals", false, "make every shell command wait for berth session approve")
	f.IntVar(&req.MaxSteps, "max-steps", 0, fmt.Sprintf("model calls a turn may make (default %d)", agent.DefaultMaxSteps))
	// The words of berth sandbox create.
	f.DurationVar(&req.IdleTimeout, "idle-timeout", 0, "pause its sandbox after this long without a command (default 5m)")
	f.DurationVar(&req.HibernateAfter, "hibernate-after", 0, "checkpoint and free its sandbox after this long without a command (default 30m)")
	f.BoolVar(&noIdle, "no-idle-timeout", false, "never pause its sandbox")
	f.BoolVar(&noHibernate, "no-hibernate", false, "never hibernate its sandbox")
	f.StringVar(&req.SystemPrompt, "instructions", "", "the agent's instructions (default: berth's; AGENTS.md in the workspace joins them)")
	f.StringVar(&req.FromSnapshot, "from-snapshot", "", "fill its workspace from this snapshot (a template)")
	f.BoolVar(&req.Hibernated, "hibernated", false, "start its sandbox hibernated: nothing is made until its first turn or command, which makes it (from --from-snapshot)")
	checkpointFlags(f, &req.CheckpointEvery, &req.CheckpointInterval, &req.CheckpointIdle)
	out = addFormat(f, formatJSON)
	_ = cmd.RegisterFlagCompletionFunc("from-snapshot", completeSnapshots(sf.cf))
	return cmd
}

// printInfo prints a session's id, or the whole Info as JSON.
func printInfo(w io.Writer, f format, info session.Info) error {
	if f == formatText {
		_, err := fmt.Fprintln(w, info.ID)
		return err
	}
	return writeJSON(w, info)
}

func newSessionSend(sf *sessionFlags) *cobra.Command {
	var (
		noWait bool
		out    *format
	)
	cmd := &cobra.Command{
		Use:   "send SESSION MESSAGE...",
		Short: "Send a message and print the tool activity and the answer as they come",
		Long: `berth session send sends a message to a session, then prints what the agent
does as it does it: what the model says, each tool call, a command's
output as it runs, then the rest of the answer. The
message is the arguments joined by spaces, or standard input when it is
"-". A turn that fails prints why and exits 125. With -o jsonl it prints
one event a line: {"type": "turn"|"text"|"call"|"stdout"|"stderr"|"approval"|"output"|"answer"|"error", ...}.`,
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			msg := strings.Join(args[1:], " ")
			if msg == "-" {
				b, err := io.ReadAll(io.LimitReader(os.Stdin, agent.MaxMessage+1))
				if err != nil {
					return err
				}
				msg = string(b)
			}
			s, done, err := sf.dial(ctx)
			if err != nil {
				return err
			}
			defer done()
			turn, err := s.Send(ctx, args[0], msg)
			if err != nil {
				return err
			}
			if turn == 0 {
				return errdefs.Errorf(errdefs.NotFound, "session %s did not accept the message: it is ending", args[0])
			}
			p := newTurnPrinter(ctx, os.Stdout, *out == formatJSONL, args[0], turn, func(ctx context.Context, key string, off int64) ([]byte, error) {
				return s.Read(ctx, args[0], key, off)
			})
			defer p.stop()
			if err := p.event(turnEvent{Type: "turn", Turn: turn, Session: args[0]}); err != nil {
				return err
			}
			if noWait {
				return nil
			}
			t, err := s.Follow(ctx, args[0], turn, p.see)
			if gone := (*berth.UnavailableError)(nil); errors.As(err, &gone) {
				// What may have run is the turn, whatever call waited
				// for it; the session shows its end.
				gone.Op = fmt.Sprintf("session %s turn %d", args[0], turn)
				gone.MayHaveRun, gone.ResultHint = true, "berth session show "+args[0]
			}
			if err != nil {
				return err
			}
			return p.finish(t)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the message is accepted")
	out = addFormat(cmd.Flags(), formatJSONL)
	return cmd
}

func newSessionShow(sf *sessionFlags) *cobra.Command {
	var out *format
	cmd := &cobra.Command{
		Use:   "show SESSION",
		Short: "Show a session's turns, status, token usage and its sandbox's held and active seconds",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			st, err := s.State(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if *out == formatJSON {
				held, active := sandboxSeconds(st, time.Now())
				return writeJSON(os.Stdout, shownState{State: st, HeldSeconds: held, ActiveSeconds: active})
			}
			return printState(os.Stdout, args[0], st)
		}),
	}
	out = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

// printState prints a session's turns for people, what came from the
// model or the sandbox made safe for the terminal (see turnPrinter).
func printState(w io.Writer, ref string, st agent.State) error {
	var times string
	if st.Sandbox.Held > 0 || !st.Sandbox.HeldSince.IsZero() {
		held, active := sandboxSeconds(st, time.Now())
		times = fmt.Sprintf(" (held %ss, active %ss)", formatFloat(held), formatFloat(active))
	}
	fmt.Fprintf(w, "session %s: %s, sandbox %s%s, %d messages, %d tokens\n", ref, st.Status, dash(string(st.Sandbox.State)), times, st.Messages, st.Usage.TotalTokens)
	turns := st.Turns
	if st.Turn.Number > 0 && (len(turns) == 0 || turns[len(turns)-1].Number != st.Turn.Number) {
		turns = append(turns, st.Turn)
	}
	for _, t := range turns {
		fmt.Fprintf(w, "\n> %s\n", flatten(termtext.Clean(t.Message)))
		for _, c := range t.Calls {
			if c.Said != "" {
				fmt.Fprintln(w, strings.TrimRight(termtext.Clean(c.Said), "\n"))
			}
			fmt.Fprintln(w, callLine(c.Name, c.Arguments))
		}
		switch {
		case t.Error != "":
			fmt.Fprintf(w, "[%s] %s\n", t.Status, termtext.Clean(t.Error))
		case t.Answer != "":
			fmt.Fprintln(w, strings.TrimRight(termtext.Clean(t.Answer), "\n"))
		default:
			fmt.Fprintf(w, "[%s]\n", t.Status)
		}
	}
	return nil
}

func newSessionFork(sf *sessionFlags) *cobra.Command {
	var (
		req session.ForkRequest
		out *format
	)
	cmd := &cobra.Command{
		Use:   "fork SESSION",
		Short: "Start a session with another's conversation and a copy of its workspace; print its id",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			req.Session = args[0]
			info, err := s.Fork(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printInfo(os.Stdout, *out, info)
		}),
	}
	cmd.Flags().StringVar(&req.Title, "title", "", "the new session's title (default: its id)")
	cmd.Flags().StringVar(&req.Provider, "provider", "", "where its sandbox lives (default: the source's)")
	out = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

func newSessionSwitch(sf *sessionFlags) *cobra.Command {
	var req session.SwitchRequest
	cmd := &cobra.Command{
		Use:   "switch SESSION PROVIDER",
		Short: "Move a session's workspace to another provider",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			req.Session, req.Provider = args[0], args[1]
			_, err := s.Switch(cmd.Context(), req)
			return err
		}),
	}
	cmd.Flags().StringVar(&req.Image, "image", "", "the image on the new provider (default: the provider's)")
	return cmd
}

func newSessionRename(sf *sessionFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rename SESSION TITLE",
		Short: "Give a session a new title",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			_, err := s.Rename(cmd.Context(), session.RenameRequest{Session: args[0], Title: args[1]})
			return err
		}),
	}
}

func newSessionRm(sf *sessionFlags) *cobra.Command {
	var keep bool
	cmd := &cobra.Command{
		Use:   "rm SESSION...",
		Short: "End sessions and delete their workspace and conversation",
		Long: `berth session rm ends each session and removes it, printing its id. Its
workspace and its conversation are deleted, unless --keep, which keeps
the workspace as a snapshot and prints the snapshot's id instead.`,
		Args: usageArgs(cobra.MinimumNArgs(1)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			for _, ref := range args {
				res, err := s.Destroy(cmd.Context(), session.DestroyRequest{Session: ref, Keep: keep})
				if err != nil {
					return fmt.Errorf("%s: %w", ref, err)
				}
				switch {
				case res.Snapshot != "":
					fmt.Println(res.Snapshot)
				case res.Session != "":
					fmt.Println(res.Session)
				default: // a manager that does not say
					fmt.Println(ref)
				}
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the workspace as a snapshot")
	return cmd
}

func newSessionApprove(sf *sessionFlags, use string, approve bool) *cobra.Command {
	short := "Let the shell command awaiting approval run"
	if !approve {
		short = "Refuse the shell command awaiting approval"
	}
	return &cobra.Command{
		Use:   use + " SESSION [CALL-ID]",
		Short: short,
		Long:  short + ": the one named, or the only one awaiting.",
		Args:  usageArgs(cobra.RangeArgs(1, 2)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			ctx := cmd.Context()
			var id string
			if len(args) == 2 {
				id = args[1]
			} else {
				st, err := s.State(ctx, args[0])
				if err != nil {
					return err
				}
				if id, err = awaiting(st); err != nil {
					return fmt.Errorf("session %s: %w", args[0], err)
				}
			}
			return s.Approve(ctx, args[0], id, approve)
		}),
	}
}

// awaiting finds the one call that awaits approval.
func awaiting(st agent.State) (string, error) {
	var ids []string
	for _, c := range st.Turn.Calls {
		if c.Status == agent.StatusApproval {
			ids = append(ids, c.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", errdefs.Errorf(errdefs.BadInput, "no tool call awaits approval")
	case 1:
		return ids[0], nil
	}
	return "", errdefs.Errorf(errdefs.BadInput, "%d calls await approval (%s): name one", len(ids), strings.Join(ids, ", "))
}

func newSessionPause(sf *sessionFlags, use string) *cobra.Command {
	short := "Pause a session's sandbox now (its next message resumes it)"
	if use == "resume" {
		short = "Resume a session's paused sandbox"
	}
	return &cobra.Command{
		Use:   use + " SESSION",
		Short: short,
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: sf.runE(func(cmd *cobra.Command, args []string, s *berth.Sessions) error {
			op := s.Pause
			if use == "resume" {
				op = s.Resume
			}
			info, err := op(cmd.Context(), args[0])
			if err == nil {
				fmt.Println(info.ID)
			}
			return err
		}),
	}
}

// shownState is a session's state as show -o json prints it: the
// workflow's, and the seconds its sandbox was held (existed, running or
// paused) and active (ran a command) up to now, which a query cannot
// count (the workflow's state says since when).
type shownState struct {
	agent.State
	HeldSeconds   float64 `json:"held_seconds"`
	ActiveSeconds float64 `json:"active_seconds"`
}

// sandboxSeconds are the seconds a session's sandbox was held and
// active up to now, to the millisecond.
func sandboxSeconds(st agent.State, now time.Time) (held, active float64) {
	sb := st.Sandbox
	return untilNow(sb.Held, sb.HeldSince, now), untilNow(sb.Active, sb.ActiveSince, now)
}

// untilNow is d, and the time from since to now when since is set, in
// seconds to the millisecond.
func untilNow(d time.Duration, since, now time.Time) float64 {
	if !since.IsZero() && now.After(since) {
		d += now.Sub(since)
	}
	return math.Round(d.Seconds()*1000) / 1000
}
