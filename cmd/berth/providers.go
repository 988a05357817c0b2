package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	tclient "go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/client"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

func newProviders(cf *connFlags) *cobra.Command {
	var out *format
	cmd := &cobra.Command{
		Use:   "providers",
		Short: "List the providers every host serves, with what they can do, and why not the others",
		Long: `berth providers asks every host which providers it serves (PROVIDER, STATUS
ready, HOST its queue, and what each does natively) and, of the others
its binary links, why it does not (a binary or engine missing...). A
host that does not answer within a few seconds (stopped lately, or too
busy) is shown as one line, STATUS unreachable; the others still are.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			hosts, err := providerStatuses(ctx, c)
			if err != nil {
				return fmt.Errorf("list providers: %s", oneLine(err))
			}
			list := providerRows(hosts)
			if *out == formatJSON {
				return writeJSON(os.Stdout, list)
			}
			return printProviders(os.Stdout, list)
		},
	}
	out = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

// providerRow is a line of berth providers: a provider of a host, or a
// host that did not answer (Unreachable, no Name, Reason why).
type providerRow struct {
	provider.Status
	Unreachable bool `json:"unreachable,omitempty"`
}

// providerRows flattens the hosts' answers into one row per provider
// of each host, hosts in order, and one per host that did not answer.
func providerRows(hosts []sandbox.HostProviders) []providerRow {
	rows := []providerRow{}
	for _, h := range hosts {
		if h.Unreachable {
			rows = append(rows, providerRow{Status: provider.Status{Host: h.Host, Reason: h.Error}, Unreachable: true})
			continue
		}
		for _, s := range h.Providers {
			s.Host = h.Host
			rows = append(rows, providerRow{Status: s})
		}
	}
	return rows
}

// printProviders writes the rows as a table.
func printProviders(out io.Writer, rows []providerRow) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROVIDER\tSTATUS\tHOST\tDETAILS")
	for _, s := range rows {
		name, status, details := s.Name, "ready", capabilities(s.Capabilities)
		switch {
		case s.Unreachable:
			name, status, details = "-", "unreachable", flatten(s.Reason)
		case !s.Available:
			status, details = "unavailable", flatten(s.Reason)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", name, status, s.Host, details)
	}
	return w.Flush()
}

// providerStatuses runs the Providers workflow: only workers know.
func providerStatuses(ctx context.Context, c *client.Client) ([]sandbox.HostProviders, error) {
	id := client.NewID("providers-")
	var out []sandbox.HostProviders
	err := c.Retry(ctx, func(ctx context.Context) error {
		run, err := c.Temporal().ExecuteWorkflow(ctx, tclient.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue},
			workflows.Providers, workflows.ProvidersInput{})
		if err != nil {
			return err
		}
		return run.Get(ctx, &out)
	})
	return out, err
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
		{c.Pause, "pause"}, {c.CPU, "cpu"}, {c.Memory, "memory"}, {c.Pids, "pids"}, {c.Disk, "disk"},
		{c.Network, "network"}, {c.RootFS, "rootfs"}, {c.Image, "image"}, {c.HostBound, "host-bound"},
	} {
		if f.on {
			has = append(has, f.name)
		}
	}
	return strings.Join(has, ",")
}
