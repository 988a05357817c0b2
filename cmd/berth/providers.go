package main

import (
	"context"
	"fmt"
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
		Short: "List the providers the workers serve, with what they can do, and why not the others",
		Long: `berth providers asks a worker which providers it serves (PROVIDER, STATUS
ready, HOST its queue, and what each does natively) and, of the others
its binary links, why it does not (a binary or engine missing...).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			list, err := providerStatuses(ctx, c)
			if err != nil {
				return fmt.Errorf("list providers: %s", oneLine(err))
			}
			if *out == formatJSON {
				if list == nil {
					list = []provider.Status{}
				}
				return writeJSON(os.Stdout, list)
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PROVIDER\tSTATUS\tHOST\tDETAILS")
			for _, s := range list {
				status, details := "ready", capabilities(s.Capabilities)
				if !s.Available {
					status, details = "unavailable", flatten(s.Reason)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, status, s.Host, details)
			}
			return w.Flush()
		},
	}
	out = addFormat(cmd.Flags(), formatJSON)
	return cmd
}

// providerStatuses runs the Providers workflow: only workers know.
func providerStatuses(ctx context.Context, c *client.Client) ([]provider.Status, error) {
	id := client.NewID("providers-")
	var out []provider.Status
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
