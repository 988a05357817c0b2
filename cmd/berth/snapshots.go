package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
)

func newSnapshot(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "List and delete workspace snapshots",
		Long: `Snapshots live in the workers' blob store; berth reaches them through the
server. Users' snapshots (berth sandbox snapshot) are kept until deleted;
berth's own checkpoints are deleted with their sandbox.`,
	}
	cmd.AddCommand(newSnapshotLs(cf), newSnapshotRm(cf))
	return cmd
}

// snapshotRow is a line of berth snapshot ls, and its JSON.
type snapshotRow struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	// Sandbox is the sandbox it was taken of, by the id its user knows.
	Sandbox string    `json:"sandbox"`
	Files   int64     `json:"files"`
	Size    int64     `json:"size_bytes"`
	Created time.Time `json:"created"`
	Age     float64   `json:"age_seconds"`
}

func newSnapshotLs(cf *connFlags) *cobra.Command {
	return listing[snapshotRow]{
		short:   "List snapshots: id, kind, the sandbox they were taken of, files, size, age",
		allHelp: "include berth's own checkpoints",
		list:    listSnapshots,
		id:      func(r snapshotRow) string { return r.ID },
		header:  "ID\tKIND\tSANDBOX\tFILES\tSIZE\tAGE",
		line: func(r snapshotRow) string {
			return fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s", r.ID, r.Kind, r.Sandbox,
				r.Files, humanBytes(r.Size), time.Duration(r.Age*float64(time.Second)))
		},
	}.command(cf)
}

// listSnapshots lists users' snapshots, and berth's checkpoints too when
// all.
func listSnapshots(ctx context.Context, c *berth.Client, all bool) ([]snapshotRow, error) {
	// Only workers reach the store: the SDK asks them.
	snaps, err := c.Snapshots().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %s", oneLine(err))
	}
	rows := []snapshotRow{}
	for _, s := range snaps {
		if !s.User && !all {
			continue
		}
		rows = append(rows, snapshotRow{ID: s.ID, Kind: s.Kind, Sandbox: s.Sandbox, Files: int64(s.Files),
			Size: s.Size, Created: s.Created, Age: time.Since(s.Created).Round(time.Second).Seconds()})
	}
	return rows, nil
}

func newSnapshotRm(cf *connFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "rm ID...",
		Short:             "Delete snapshots (their data goes at the next reaping); prints the ids deleted",
		Args:              usageArgs(cobra.MinimumNArgs(1)),
		ValidArgsFunction: completeSnapshots(cf),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Temporal().Close()
			deleted, failed, err := c.Snapshots().Remove(ctx, args...)
			if err != nil {
				return fmt.Errorf("snapshot rm: %s", oneLine(err))
			}
			for _, id := range deleted {
				fmt.Println(id)
			}
			for _, f := range failed {
				fmt.Fprintf(os.Stderr, "berth: snapshot %s: %s: %s\n", f.ID, f.Kind, f.Message)
			}
			if len(failed) > 0 {
				return exitError{exitBerth}
			}
			return nil
		},
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
