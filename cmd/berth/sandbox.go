package main

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/berth-dev/berth"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/snapshot"
)

func newSandbox(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create and drive long-lived sandboxes, each kept by its own workflow",
		Long: `A standalone sandbox lives in a workflow of its own until it is removed or
its lifetime ends. It pauses when idle and wakes on the next command. Its
operations are Workflow Updates, so other programs can drive it too (see
docs/protocol.md).`,
	}
	cmd.AddCommand(newSandboxCreate(cf), newSandboxExec(cf), newSandboxAttach(cf), newSandboxKill(cf), newSandboxShell(cf), newSandboxCp(cf), newSandboxLs(cf), newSandboxRm(cf),
		newSandboxInspect(cf),
		newSandboxSnapshot(cf), newSandboxFork(cf), newSandboxSwitch(cf), newSandboxNetwork(cf),
		newSandboxSimple(cf, opPause, (*berth.Sandbox).Pause, "Freeze a sandbox now (the next command resumes it)"),
		newSandboxSimple(cf, opResume, (*berth.Sandbox).Resume, "Resume a paused or hibernated sandbox"),
		newSandboxSimple(cf, opHibernate, (*berth.Sandbox).Hibernate, "Checkpoint a sandbox and free everything it holds"))
	return cmd
}

// settingsFlags are a sandbox's settings, as create sets them and fork
// overrides them; a zero value means the default (create) or the
// parent's (fork).
type settingsFlags struct {
	env                   []string
	memory, disk          string
	cpu                   float64
	idle, hibernate, life time.Duration
	noIdle, noHibernate   bool
	network               networkFlags
}

// register declares the flags; inherit says a zero value means the
// parent's setting (fork), not the default (create).
func (s *settingsFlags) register(f *pflag.FlagSet, inherit bool) {
	dflt := func(d string) string {
		if inherit {
			return " (default: the parent's)"
		}
		return " (default " + d + ")"
	}
	f.StringArrayVar(&s.env, "env", nil, "K=V: set an environment variable for every command (repeatable)")
	s.network.register(f)
	f.Float64Var(&s.cpu, "cpu", 0, "CPU cores"+dflt(defaultCPU))
	f.StringVar(&s.memory, "memory", "", "memory limit, at least 16Mi (e.g. 512Mi, 2Gi)"+dflt(defaultMemory))
	f.StringVar(&s.disk, "disk", "", "workspace size and files, at least 16Mi (e.g. 20Gi)"+dflt(defaultDisk))
	f.DurationVar(&s.idle, "idle-timeout", 0, "pause after this long without a command"+dflt("5m"))
	f.DurationVar(&s.hibernate, "hibernate-after", 0, "checkpoint and free the sandbox after this long without a command"+dflt("30m"))
	f.BoolVar(&s.noIdle, "no-idle-timeout", false, "never pause")
	f.BoolVar(&s.noHibernate, "no-hibernate", false, "never hibernate")
	f.DurationVar(&s.life, "lifetime", 0, "destroy the sandbox after this long whatever it does"+dflt("24h"))
}

// parse reads the flags into a sandbox's options.
func (s *settingsFlags) parse(o *berth.SandboxOptions) (err error) {
	if o.Env, err = parseEnv(s.env); err != nil {
		return err
	}
	o.CPU = s.cpu
	if s.network.changed() {
		if o.Network, err = s.network.policy(); err != nil {
			return err
		}
	}
	for _, b := range []struct {
		flag, v string
		dst     *int64
	}{{"--memory", s.memory, &o.Memory}, {"--disk", s.disk, &o.Disk}} {
		if b.v == "" {
			continue
		}
		if *b.dst, err = parseBytes(b.v); err != nil {
			return usageError{fmt.Errorf("%s: %w", b.flag, err)}
		}
	}
	o.IdleTimeout, o.HibernateAfter, o.Lifetime = s.idle, s.hibernate, s.life
	if s.noIdle {
		o.IdleTimeout = berth.Never
	}
	if s.noHibernate {
		o.HibernateAfter = berth.Never
	}
	return nil
}

func newSandboxCreate(cf *connFlags) *cobra.Command {
	var (
		in       berth.SandboxOptions
		settings settingsFlags
		name     string
		out      *format
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Long: `berth sandbox create starts a sandbox in a workflow of its own and prints
its id once the sandbox exists. Creating a name that exists with the
same settings finds it; with other settings it is an AlreadyExists error.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := settings.parse(&in); err != nil {
				return usageError{err}
			}
			if err := in.Checkpoint.Validate(); err != nil {
				return err
			}
			if name == "" {
				name = "sbx-" + randid.Hex(6)
			}
			if err := validateName(name); err != nil {
				return err
			}
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			// Create returns once it exists, so that a failure to create
			// it (an unknown provider, a bad limit) is reported here.
			in.ID = name
			stop := showProgress(ctx, c.Temporal(), name)
			_, err = c.Sandboxes().Create(ctx, in)
			stop()
			if err != nil {
				return err
			}
			return printID(os.Stdout, *out, name)
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "the sandbox's id (default: a random sbx-...)")
	f.StringVar(&in.Provider, "provider", berth.DefaultProvider, "where the sandbox lives (berth providers lists them)")
	f.StringVar(&in.Image, "image", "", "the image its root filesystem comes from (default: the provider's)")
	settings.register(f, false)
	f.StringVar(&in.FromSnapshot, "from-snapshot", "", "fill the workspace from this snapshot")
	f.BoolVar(&in.Hibernated, "hibernated", false, "start it hibernated: nothing is made until its first command or file operation, which makes it (from --from-snapshot)")
	checkpointFlags(f, &in.Checkpoint.Every, &in.Checkpoint.Interval, &in.Checkpoint.Idle)
	f.DurationVar(&in.HostTimeout, "host-timeout", 0, fmt.Sprintf("how long an operation waits for the sandbox's host before the sandbox is taken for lost and re-created elsewhere from its last checkpoint, %v to %v (default %v)",
		berth.MinHostTimeout, berth.MaxHostTimeout, berth.DefaultHostTimeout))
	out = addFormat(f, formatJSON)
	_ = cmd.RegisterFlagCompletionFunc("from-snapshot", completeSnapshots(cf))
	return cmd
}

// checkpointFlags declares the checkpoint policy's flags, which berth
// sandbox create and berth session new share: a lost host loses what
// changed since the last checkpoint.
func checkpointFlags(f *pflag.FlagSet, every *int, interval, idle *time.Duration) {
	f.IntVar(every, "checkpoint-every", 0, "checkpoint the workspace after every N commands, writes or removals (default: only before hibernating)")
	f.DurationVar(interval, "checkpoint-interval", 0, "checkpoint the workspace at most this long after it changed, at least 1s")
	f.DurationVar(idle, "checkpoint-idle", 0, "checkpoint the workspace once idle this long, if it changed, at least 1s")
}

// validateName checks a new sandbox's --name: an id, and not one of a
// session's form (s1, s2, ...), which the sandbox commands take to mean
// that session.
func validateName(name string) error {
	if err := provider.ValidateID(name); err != nil {
		return usageError{fmt.Errorf("--name: %w", err)}
	}
	if session.IsID(name) {
		return usageError{fmt.Errorf("--name: %s has the form of a session id (s1, s2, ...), which berth sandbox commands take to mean that session: name the sandbox otherwise", name)}
	}
	return nil
}

// The operations of berth sandbox commands that update a sandbox, by
// name.
const (
	opWriteFiles = "write-files"
	opSnapshot   = "snapshot"
	opFork       = "fork"
	opSwitch     = "switch"
	opNetwork    = "network"
	opPause      = "pause"
	opResume     = "resume"
	opHibernate  = "hibernate"
	opStop       = "stop"
)

// update runs operation op on a sandbox and waits for its result,
// showing the progress of the snapshots and restores it waits for.
func update(ctx context.Context, c *berth.Client, id, op string, do func(*berth.Sandbox, context.Context) error) error {
	if err := notForSession(id, op); err != nil {
		return err
	}
	wid := sandboxWorkflow(id)
	defer showProgress(ctx, c.Temporal(), wid)()
	return updateErr(id, do(c.Sandboxes().Handle(wid), ctx))
}

// sandboxWorkflow is the workflow that holds the sandbox id names: a
// standalone sandbox's own, or for a session's id (s1, s2, ...) that
// coding agent session's, under the default manager, whose sandbox takes
// exec, cp and inspect (the Updates of package ops).
func sandboxWorkflow(id string) string {
	if session.IsID(id) {
		return session.WorkflowID(session.DefaultManagerID, id)
	}
	return id
}

// sessionInstead says which berth session command does, to a session's
// sandbox, what a sandbox Update does to a standalone one.
var sessionInstead = map[string]string{
	opPause:     "berth session pause %s",
	opResume:    "berth session resume %s",
	opHibernate: "berth session pause %s (an idle session hibernates by itself)",
	opSnapshot:  "berth session fork %s, or berth session rm --keep %s",
	opFork:      "berth session fork %s",
	opSwitch:    "berth session switch %s PROVIDER",
	opStop:      "berth session rm %s",
}

// notForSession refuses, in one line, an operation on a session's
// sandbox that its session does: its conversation and its registry must
// follow.
func notForSession(id, op string) error {
	instead, ok := sessionInstead[op]
	if !session.IsID(id) || !ok {
		return nil
	}
	return errdefs.Errorf(errdefs.NotFound, "%s is a coding agent session, not a standalone sandbox: berth sandbox exec, cp and inspect reach its sandbox; use %s",
		id, strings.ReplaceAll(instead, "%s", id))
}

// updateErr says plainly what went wrong with an update.
func updateErr(id string, err error) error {
	if err == nil {
		return nil
	}
	if temporalerr.WorkflowNotFound(err) && session.IsID(id) {
		return fmt.Errorf("NotFound: session %s does not exist or has ended (berth session ls -a)", id)
	}
	if temporalerr.WorkflowNotFound(err) {
		return fmt.Errorf("NotFound: sandbox %s does not exist or is gone", id)
	}
	return fmt.Errorf("sandbox %s: %s", id, oneLine(err))
}

// showProgress reports on stderr, once a second after the first, how far
// the snapshots and restores of a sandbox's workflow have gone, until
// the function it returns is called.
func showProgress(ctx context.Context, c client.Client, id string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			desc, err := c.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				continue
			}
			for _, a := range desc.GetPendingActivities() {
				kind := a.GetActivityType().GetName()
				if kind != "Snapshot" && kind != "Restore" || a.GetHeartbeatDetails() == nil {
					continue
				}
				var p snapshot.Progress
				if converter.GetDefaultDataConverter().FromPayloads(a.GetHeartbeatDetails(), &p) == nil {
					fmt.Fprintf(os.Stderr, "berth: %s of %s: %d files, %s\n", strings.ToLower(kind), id, p.Files, humanBytes(p.Bytes))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// sandboxRow is a line of berth sandbox ls, and its JSON.
type sandboxRow struct {
	ID       string    `json:"id"`
	Provider string    `json:"provider"`
	State    string    `json:"state"`
	Created  time.Time `json:"created"`
	Age      float64   `json:"age_seconds"`
	// ForkOf is the sandbox a fork came from; empty for a standalone
	// one. The name session ls gives the same idea.
	ForkOf string `json:"fork_of"`
	// Owner is ForkOf under its first name, kept for scripts that read
	// it.
	Owner string `json:"owner"`
	// NoWorker: the sandbox is held (running or paused) on a host whose
	// queue no worker has polled for noWorkerAfter or more; for
	// NoWorkerSeconds, when the server knows its last poll (zero when it
	// knows none).
	NoWorker        bool    `json:"no_worker"`
	NoWorkerSeconds float64 `json:"no_worker_seconds"`
	queue           string
}

// noWorkerAfter is how long a host's queue goes unpolled before berth
// sandbox ls says its sandboxes have no worker: a live worker's poll
// lasts up to a minute, and the server notes it as it begins.
const noWorkerAfter = 70 * time.Second

// sandboxHeader and sandboxLine make berth sandbox ls's table.
const sandboxHeader = "ID\tPROVIDER\tSTATE\tAGE\tFORK OF"

func sandboxLine(r sandboxRow) string {
	state := r.State
	switch {
	case r.NoWorker && r.NoWorkerSeconds > 0:
		state += fmt.Sprintf(" (no worker for %s)", time.Duration(r.NoWorkerSeconds*float64(time.Second)).Round(time.Second))
	case r.NoWorker:
		state += " (no worker)"
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.ID, r.Provider, state,
		time.Duration(r.Age*float64(time.Second)).Round(time.Second), dash(r.ForkOf))
}

func newSandboxLs(cf *connFlags) *cobra.Command {
	return listing[sandboxRow]{
		short:   "List sandboxes with their provider, state and age",
		allHelp: "include ended sandboxes",
		list:    listSandboxes,
		id:      func(r sandboxRow) string { return r.ID },
		header:  sandboxHeader,
		line:    sandboxLine,
	}.command(cf)
}

// listSandboxes lists the Sandbox workflows, running ones unless all.
func listSandboxes(ctx context.Context, c *berth.Client, all bool) ([]sandboxRow, error) {
	infos, err := c.Sandboxes().List(ctx, berth.ListOptions{All: all})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var rows []sandboxRow
	for _, i := range infos {
		r := sandboxRow{ID: i.ID, Provider: i.Provider, State: string(i.State), Created: i.Created,
			ForkOf: i.ForkOf, Owner: i.ForkOf, queue: i.Queue}
		r.Age = time.Since(r.Created).Round(time.Second).Seconds()
		rows = append(rows, r)
	}
	if err := markNoWorker(ctx, c.Temporal(), rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// markNoWorker marks the held sandboxes whose host's queue no worker
// has polled for noWorkerAfter.
func markNoWorker(ctx context.Context, c client.Client, rows []sandboxRow) error {
	unpolled := map[string]*time.Duration{} // by queue; nil: no poll known
	for i := range rows {
		r := &rows[i]
		if r.queue == "" || (r.State != string(berth.StateRunning) && r.State != string(berth.StatePaused)) {
			continue
		}
		since, asked := unpolled[r.queue]
		if !asked {
			resp, err := c.DescribeTaskQueue(ctx, r.queue, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
			if err != nil {
				return fmt.Errorf("describe task queue %s: %w", r.queue, err)
			}
			var last time.Time
			for _, p := range resp.GetPollers() {
				if at := p.GetLastAccessTime().AsTime(); at.After(last) {
					last = at
				}
			}
			if !last.IsZero() {
				d := time.Since(last)
				since = &d
			}
			unpolled[r.queue] = since
		}
		switch {
		case since == nil:
			r.NoWorker = true
		case *since >= noWorkerAfter:
			r.NoWorker, r.NoWorkerSeconds = true, since.Round(time.Second).Seconds()
		}
	}
	return nil
}

func newSandboxRm(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "rm ID...",
		Short:             "Destroy sandboxes",
		Args:              usageArgs(cobra.MinimumNArgs(1)),
		ValidArgsFunction: completeIDs(cf, sandboxIDs, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			var errs []error
			for _, id := range args {
				// Stop returns once the workflow has ended too.
				if err := update(ctx, c, id, opStop, (*berth.Sandbox).Stop); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Println(id)
			}
			return errors.Join(errs...)
		},
	}
	return cmd
}

func newSandboxSnapshot(cf *connFlags) *cobra.Command {
	var outFmt *format
	cmd := &cobra.Command{
		Use:               "snapshot ID",
		Short:             "Snapshot a sandbox's workspace and print the snapshot's id",
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			var snap string
			err = update(cmd.Context(), c, args[0], opSnapshot, func(s *berth.Sandbox, ctx context.Context) (err error) {
				snap, err = s.Snapshot(ctx)
				return err
			})
			if err != nil {
				return err
			}
			return printID(os.Stdout, *outFmt, snap)
		},
	}
	outFmt = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

func newSandboxFork(cf *connFlags) *cobra.Command {
	var (
		req      berth.SandboxOptions
		prov     string
		settings settingsFlags
		outFmt   *format
	)
	cmd := &cobra.Command{
		Use:               "fork ID",
		Short:             "Make a new sandbox whose workspace is a copy of this one's, and print its id",
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			if req.ID == "" {
				req.ID = "sbx-" + randid.Hex(6)
			}
			if err := validateName(req.ID); err != nil {
				return err
			}
			req.Provider = prov
			if err := settings.parse(&req); err != nil {
				return usageError{err}
			}
			var fork *berth.Sandbox
			err = update(ctx, c, args[0], opFork, func(s *berth.Sandbox, ctx context.Context) (err error) {
				fork, err = s.Fork(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			return printID(os.Stdout, *outFmt, fork.ID())
		},
	}
	cmd.Flags().StringVar(&req.ID, "name", "", "the new sandbox's id (default: a random sbx-...)")
	cmd.Flags().StringVar(&prov, "provider", "", "where the new sandbox lives (default: the same provider)")
	cmd.Flags().StringVar(&req.Image, "image", "", "the image of the new sandbox's root filesystem (default: the same)")
	settings.register(cmd.Flags(), true)
	outFmt = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

func newSandboxSwitch(cf *connFlags) *cobra.Command {
	var req struct{ Provider, Image string }
	cmd := &cobra.Command{
		Use:   "switch ID --provider P",
		Short: "Move a sandbox to another provider (or image): its workspace goes along, its processes do not",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Provider == "" {
				return usageError{fmt.Errorf("sandbox switch: --provider is required")}
			}
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			return update(cmd.Context(), c, args[0], opSwitch, func(s *berth.Sandbox, ctx context.Context) error {
				return s.Switch(ctx, req.Provider, req.Image)
			})
		},
	}
	cmd.Flags().StringVar(&req.Provider, "provider", "", "the provider to move to (berth providers lists them)")
	cmd.Flags().StringVar(&req.Image, "image", "", "the image of its root filesystem there (default: the same)")
	return cmd
}

// newSandboxSimple makes a command that runs one argument-less
// operation.
func newSandboxSimple(cf *connFlags, use string, do func(*berth.Sandbox, context.Context) error, short string) *cobra.Command {
	cmd := &cobra.Command{
		Use:               use + " ID",
		Short:             short,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			return update(cmd.Context(), c, args[0], use, do)
		},
	}
	return cmd
}
