package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
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
