package main

import (
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
)

func newSnapshot() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "List and delete workspace snapshots",
		Long: `Snapshots live in the blob store (by default a directory in the data
directory). Users' snapshots (berth sandbox snapshot) are kept until
deleted; berth's own checkpoints are deleted with their sandbox.`,
	}
	cmd.AddCommand(newSnapshotLs(), newSnapshotRm())
	return cmd
}

// snapshotFlags are the flags that say where snapshots are.
type snapshotFlags struct{ dataDir, blob string }

func (f *snapshotFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.dataDir, "data-dir", defaultDataDir(), "berth's data directory")
	cmd.Flags().StringVar(&f.blob, "blob", "", "blob store URL (default a directory in --data-dir)")
}

func (f *snapshotFlags) open(cmd *cobra.Command) (*snapshot.Store, func(), error) {
	url := f.blob
	if url == "" {
		url = blobURL(f.dataDir)
	}
	b, err := openBucket(cmd.Context(), url)
	if err != nil {
		return nil, nil, err
	}
	b = blob.PrefixedBucket(b, snapshotPrefix) // closing it closes the one it wraps
	return snapshot.New(b), func() { b.Close() }, nil
}

func newSnapshotLs() *cobra.Command {
	var (
		f   snapshotFlags
		all bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List snapshots",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, closeStore, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer closeStore()
			infos, err := store.List(cmd.Context())
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tKIND\tSANDBOX\tFILES\tSIZE\tAGE")
			for _, info := range infos {
				if info.Kind != snapshot.KindUser && !all {
					continue
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", info.ID, info.Kind, info.Labels[sandbox.LabelSandbox],
					info.Files, humanBytes(info.Size), time.Since(info.Created).Round(time.Second))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "include berth's own checkpoints")
	f.register(cmd)
	return cmd
}

func newSnapshotRm() *cobra.Command {
	var f snapshotFlags
	cmd := &cobra.Command{
		Use:   "rm ID...",
		Short: "Delete snapshots (their data goes at the next reaping)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, closeStore, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer closeStore()
			var errs []error
			for _, id := range args {
				if err := store.Delete(cmd.Context(), id); err != nil {
					errs = append(errs, fmt.Errorf("snapshot %s: %w", id, err))
				}
			}
			return errors.Join(errs...)
		},
	}
	f.register(cmd)
	return cmd
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
