package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/termtext"
	"github.com/berth-dev/berth/provider"
)

func newProviders(cf *connFlags) *cobra.Command {
	var out *format
	cmd := &cobra.Command{
		Use:   "providers",
		Short: "List the providers every host serves, with what they can do, and why not the others",
		Long: `berth providers asks every host which providers it serves, and of the
others its binary links why it does not: one line each, PROVIDER,
STATUS, HOST (its queue), DETAILS. STATUS is one of:

  ready        served; DETAILS says what it does natively
  unavailable  not opened: DETAILS says why (a binary, an engine or a key
               missing...)
  unreachable  served, but its service (E2B...) did not answer the
               host's check within 5 s, or failed it: DETAILS says how
  refused      served, but its service refused the key

A host that does not answer within a few seconds (stopped lately, or too
busy) is shown as one line, PROVIDER -, STATUS unreachable; the others
still are.
A line after them says what a worker finds of the coding agent's model
now: ready, unknown (its server lists no models: the first call will
tell), unavailable and why, or none configured.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			// The model is asked beside the providers, not after them.
			var st model.Status
			asked := make(chan struct{})
			go func() {
				defer close(asked)
				st = modelStatus(ctx, c)
			}()
			hosts, err := providerStatuses(ctx, c)
			<-asked
			if err != nil {
				return fmt.Errorf("list providers: %s", oneLine(err))
			}
			list := append(providerRows(hosts), modelRow(st))
			if *out == formatJSON {
				return writeJSON(os.Stdout, list)
			}
			return printProviders(os.Stdout, list)
		},
	}
	out = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

// providerRow is a line of berth providers: a provider of a host, a
// host that did not answer (Unreachable, no Name, Reason why), or the
// coding agent's model (Model, no Name).
type providerRow struct {
	provider.Availability
	// State is the table's STATUS: ready, unavailable (not opened),
	// unreachable (the host, or a provider's service, did not answer),
	// refused (a provider's service refused the key); of the model, its
	// model.Status.State.
	State       string        `json:"status"`
	Unreachable bool          `json:"unreachable,omitempty"`
	Model       *model.Status `json:"model,omitempty"`
}

// modelRow is the row of the model's status.
func modelRow(st model.Status) providerRow {
	return providerRow{
		Availability: provider.Availability{Available: st.State == model.Ready || st.State == model.Unknown, Reason: st.Reason},
		State:        st.State, Model: &st,
	}
}

// providerRows flattens the hosts' answers into one row per provider
// of each host, hosts in order, and one per host that did not answer.
func providerRows(hosts []berth.HostProviders) []providerRow {
	rows := []providerRow{}
	for _, h := range hosts {
		if h.Unreachable {
			rows = append(rows, providerRow{Availability: provider.Availability{Host: h.Host, Reason: h.Error}, State: "unreachable", Unreachable: true})
			continue
		}
		for _, s := range h.Providers {
			s.Host = h.Host
			rows = append(rows, providerRow{Availability: s, State: providerState(s)})
		}
	}
	return rows
}

// providerState is a provider's STATUS: whether the host serves it and,
// of one over a service, how the service answered the host's check.
func providerState(s provider.Availability) string {
	switch {
	case !s.Available:
		return "unavailable"
	case s.ServiceError == "":
		return "ready"
	case s.ServiceKind == errdefs.ProviderAuth:
		return "refused"
	default:
		return "unreachable"
	}
}

// printProviders writes the rows as a table, and the model's as a line
// after it.
func printProviders(out io.Writer, rows []providerRow) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROVIDER\tSTATUS\tHOST\tDETAILS")
	var models []*model.Status
	for _, s := range rows {
		name, details := s.Name, capabilities(s.Capabilities)
		switch {
		case s.Model != nil:
			models = append(models, s.Model)
			continue
		case s.Unreachable:
			name, details = "-", flatten(s.Reason)
		case !s.Available:
			details = flatten(s.Reason)
		case s.ServiceError != "":
			details = termtext.Clean(flatten(s.ServiceError)) // the service's words among them
		case s.Note != "":
			details += "; " + termtext.Clean(flatten(s.Note)) // the engine's words among them
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, s.State, s.Host, details)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, m := range models {
		fmt.Fprintln(out, modelLine(m))
	}
	return nil
}

// modelLine says what a worker found of the model: model NAME at HOST:
// STATE[: REASON].
func modelLine(m *model.Status) string {
	line := "model: " + m.State
	if m.Model != "" {
		line = fmt.Sprintf("model %s at %s: %s", m.Model, m.Server, m.State)
	}
	if m.Reason != "" {
		line += ": " + flatten(m.Reason)
	}
	return termtext.Clean(line) // the server's words, and its name, from the environment
}

// modelStatusWait bounds the question of the model's status: a worker
// takes it within 5s and checks the model within 10s.
const modelStatusWait = 30 * time.Second

// modelStatus asks the session manager: a worker serving the sessions'
// model checks it now. Its failure is the model's reason.
func modelStatus(ctx context.Context, c *berth.Client) model.Status {
	// A worker that does not know the question (an older berth) must
	// not hold the providers' answer.
	ctx, cancel := context.WithTimeout(ctx, modelStatusWait)
	defer cancel()
	st, err := c.Sessions("").ModelStatus(ctx)
	if err != nil {
		return model.Status{State: model.Unavailable, Reason: "cannot ask the workers: " + oneLine(err)}
	}
	return st
}

// providerStatuses asks the catalog: only workers know.
func providerStatuses(ctx context.Context, c *berth.Client) ([]berth.HostProviders, error) {
	return c.Providers(ctx)
}

// capabilities names what a provider does natively, for a table.
func capabilities(c *provider.Capabilities) string {
	if c == nil {
		return ""
	}
	var has []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{c.Pause, "pause"}, {c.Hibernate, "hibernate"}, {c.CPU, "cpu"}, {c.Memory, "memory"}, {c.Pids, "pids"}, {c.Disk, "disk"},
		{c.Network, "network"}, {c.NetworkAllow, "network-allow"},
		{c.NetworkCredentials, "network-credentials"}, {c.RootFS, "rootfs"}, {c.Image, "image"}, {c.HostBound, "host-bound"},
	} {
		if f.on {
			has = append(has, f.name)
		}
	}
	return strings.Join(has, ",")
}
