package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/workflows"
)

// listing is what berth's ls commands share: rows listed from the
// server, printed as a table, as their ids alone (-q), or as JSON.
type listing[R any] struct {
	short   string // the command's short help
	allHelp string // -a's help
	// list lists the rows; all is -a.
	list func(ctx context.Context, c *berth.Client, all bool) ([]R, error)
	id   func(R) string
	// header is the table's header, and line a row's line, each
	// tab-separated.
	header string
	line   func(R) string
}

// command is the ls command of l.
func (l listing[R]) command(cf *connFlags) *cobra.Command {
	var (
		all, quiet bool
		outFmt     *format
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: l.short,
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			rows, err := l.list(ctx, c, all)
			if err != nil {
				return err
			}
			return l.print(rows, quiet, *outFmt)
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, l.allHelp)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print ids only, one a line")
	outFmt = addFormat(cmd.Flags(), formatJSON, formatJSONL)
	return cmd
}

func (l listing[R]) print(rows []R, quiet bool, outFmt format) error {
	switch {
	case quiet:
		for _, r := range rows {
			fmt.Println(l.id(r))
		}
		return nil
	case outFmt == formatJSON:
		if rows == nil {
			rows = []R{} // [], not null
		}
		return writeJSON(os.Stdout, rows)
	case outFmt == formatJSONL:
		for _, r := range rows {
			if err := writeJSON(os.Stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, l.header)
	for _, r := range rows {
		fmt.Fprintln(w, l.line(r))
	}
	return w.Flush()
}

// listWorkflows lists the workflows of type kind (a workflows.*WorkflowName,
// or a legacy name of it), running ones unless all, as rows made by
// row, through every page of the answer.
func listWorkflows[R any](ctx context.Context, c client.Client, kind string, all bool, row func(*workflowpb.WorkflowExecutionInfo) R) ([]R, error) {
	query := "WorkflowType IN (" + strings.Join(typeNames(kind), ", ") + ")"
	if !all {
		query += " AND ExecutionStatus = 'Running'"
	}
	var (
		rows  []R
		token []byte
	)
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.Executions {
			rows = append(rows, row(e))
		}
		if token = resp.NextPageToken; len(token) == 0 {
			return rows, nil
		}
	}
}

// typeNames are kind and its legacy names, quoted for a visibility
// query: a sandbox started before berth.Sandbox is still a sandbox.
func typeNames(kind string) []string {
	names := []string{"'" + kind + "'"}
	for _, old := range workflows.OldNames(kind) {
		names = append(names, "'"+old+"'")
	}
	return names
}

// isType says whether a workflow type name is kind or a legacy name of
// it.
func isType(name, kind string) bool {
	return name == kind || slices.Contains(workflows.OldNames(kind), name)
}
