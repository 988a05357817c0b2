package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
)

// inspection is a sandbox's whole state as berth sandbox inspect prints
// it. Durations are in seconds; a null timeout means never.
type inspection struct {
	ID string `json:"id"`
	// Sandbox is its id at the provider, which changes with each
	// generation (a hibernation, a recovery).
	Sandbox string `json:"sandbox"`
	// NotYetMade: it started hibernated and was never woken, so it has
	// no id at a provider yet; its first operation makes it from
	// Checkpoint.
	NotYetMade bool      `json:"not_yet_made"`
	Provider   string    `json:"provider"`
	Image      string    `json:"image"`
	State      string    `json:"state"`
	Generation int       `json:"generation"`
	Checkpoint string    `json:"checkpoint"`
	Created    time.Time `json:"created"`
	LastActive time.Time `json:"last_active"`
	// MovesAt is when the sandbox moves to a new instance before its
	// provider's service would end it; null where it has no such limit.
	MovesAt  *time.Time `json:"moves_at"`
	Held     float64    `json:"held_seconds"`
	Active   float64    `json:"active_seconds"`
	Commands int        `json:"commands"`
	Running  []string   `json:"running"`
	Output   int64      `json:"output_stored_bytes"`
	// Resources as asked for: zero is the provider's default.
	CPU       float64  `json:"cpu"`
	Memory    int64    `json:"memory_bytes"`
	Disk      int64    `json:"disk_bytes"`
	Pids      int64    `json:"pids"`
	Idle      *float64 `json:"idle_timeout_seconds"`
	Hibernate *float64 `json:"hibernate_after_seconds"`
	Lifetime  float64  `json:"lifetime_seconds"`
	// EnvKeys names the environment variables set: their values may be
	// secrets, and stay in the workflow.
	EnvKeys      []string `json:"env_keys"`
	FromSnapshot string   `json:"from_snapshot"`
	// Network is the sandbox's network policy now.
	Network berth.Network `json:"network"`
}

// inspect turns a sandbox's status into what inspect prints, at now.
func inspect(id string, st berth.SandboxStatus, now time.Time) inspection {
	since := func(d time.Duration, t time.Time) float64 {
		if !t.IsZero() && now.After(t) {
			d += now.Sub(t)
		}
		return math.Round(d.Seconds()*1000) / 1000
	}
	timeout := func(d, dflt time.Duration) *float64 {
		if d < 0 {
			return nil
		}
		if d == 0 {
			d = dflt
		}
		s := d.Seconds()
		return &s
	}
	cfg := st.Options
	in := inspection{
		ID: id, Sandbox: st.Instance, NotYetMade: st.NotYetMade, Provider: st.Provider, State: string(st.State),
		Generation: st.Generation, Checkpoint: st.Checkpoint,
		Created: st.Created, LastActive: st.LastActive,
		Held: since(st.Held, st.HeldSince), Active: since(st.Active, st.ActiveSince),
		Commands: st.Commands, Running: []string{}, Output: st.OutputStored,
		CPU: cfg.CPU, Memory: cfg.Memory, Disk: cfg.Disk, Pids: cfg.Pids,
		Idle:      timeout(cfg.IdleTimeout, berth.DefaultIdleTimeout),
		Hibernate: timeout(cfg.HibernateAfter, berth.DefaultHibernateAfter),
		Lifetime:  *timeout(max(cfg.Lifetime, 0), berth.DefaultLifetime),
		EnvKeys:   []string{}, FromSnapshot: cfg.FromSnapshot, Image: cfg.Image,
		Network: st.Network,
	}
	if !st.MovesAt.IsZero() {
		in.MovesAt = &st.MovesAt
	}
	for k := range cfg.Env {
		in.EnvKeys = append(in.EnvKeys, k)
	}
	slices.Sort(in.EnvKeys)
	in.Running = append(in.Running, st.Running...)
	return in
}

// writeText prints the inspection as key: value lines, the keys those
// of its JSON.
func (in inspection) writeText(w io.Writer) error {
	secs := func(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) }
	opt := func(s *float64) string {
		if s == nil {
			return "never"
		}
		return secs(*s)
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Local().Format(time.RFC3339)
	}
	whenP := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return when(*t)
	}
	instance := in.Sandbox
	if in.NotYetMade {
		instance = "none yet: started hibernated, its first operation makes it"
		if in.Checkpoint != "" {
			instance += " from snapshot " + in.Checkpoint
		}
	}
	lines := [][2]string{
		{"id", in.ID}, {"sandbox", instance}, {"not_yet_made", fmt.Sprint(in.NotYetMade)}, {"provider", in.Provider}, {"image", in.Image}, {"state", in.State},
		{"generation", fmt.Sprint(in.Generation)}, {"checkpoint", in.Checkpoint},
		{"created", when(in.Created)}, {"last_active", when(in.LastActive)}, {"moves_at", whenP(in.MovesAt)},
		{"held_seconds", secs(in.Held)}, {"active_seconds", secs(in.Active)},
		{"commands", fmt.Sprint(in.Commands)}, {"running", strings.Join(in.Running, " ")},
		{"output_stored_bytes", fmt.Sprint(in.Output)},
		{"cpu", asked(formatFloat(in.CPU), defaultCPU)}, {"memory_bytes", asked(fmt.Sprint(in.Memory), defaultMemory)},
		{"disk_bytes", asked(fmt.Sprint(in.Disk), defaultDisk)}, {"pids", asked(fmt.Sprint(in.Pids), defaultPids)},
		{"idle_timeout_seconds", opt(in.Idle)}, {"hibernate_after_seconds", opt(in.Hibernate)},
		{"lifetime_seconds", secs(in.Lifetime)},
		{"env_keys", strings.Join(in.EnvKeys, " ")}, {"from_snapshot", in.FromSnapshot},
		{"network", describeNetwork(in.Network)},
	}
	var b strings.Builder
	for _, l := range lines {
		if l[1] == "" {
			fmt.Fprintf(&b, "%s:\n", l[0])
		} else {
			fmt.Fprintf(&b, "%s: %s\n", l[0], l[1])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func newSandboxInspect(cf *connFlags) *cobra.Command {
	var outFmt *format
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a sandbox's whole state: settings, state, generation, time held and active, commands",
		Long: `berth sandbox inspect prints a sandbox's state as key: value lines, or
with -o json as one object with the same keys. Durations are seconds in
JSON and text; a timeout that never fires is null in JSON and "never"
in text. Resources are as asked for: 0 is the provider's default, which
the text names (as create --help does).`,
		Args:              usageArgs(cobra.ExactArgs(1)),
		ValidArgsFunction: completeSandboxes(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			id := args[0]
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			st, err := c.Sandboxes().Handle(sandboxWorkflow(id)).Status(ctx)
			if err != nil {
				return updateErr(id, err)
			}
			in := inspect(id, st, time.Now())
			if *outFmt == formatJSON {
				return writeJSON(os.Stdout, in)
			}
			return in.writeText(os.Stdout)
		},
	}
	outFmt = addFormat(cmd.Flags(), formatJSON)
	return cmd
}
