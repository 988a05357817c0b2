package main

import (
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
)

func newWorker(cf *connFlags) *cobra.Command {
	var (
		dataDir, blob, queue, hostQueue string
		providers                       []string
		verbose                         bool
		reapEvery, outputRetention      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a berth worker against a Temporal cluster",
		Long: `berth worker joins a Temporal cluster or Temporal Cloud, configured as the
temporal CLI is: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
TLS settings and config-file profiles (TEMPORAL_PROFILE), or the flags
of the same names that every berth command takes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(verbose)
			opts, err := cf.options()
			if err != nil {
				return err
			}
			opts.Logger = hostworker.Logger(log.With("component", "sdk"))
			c, err := client.DialContext(ctx, opts)
			if err != nil {
				return err
			}
			defer c.Close()
			if blob == "" {
				blob = blobURL(dataDir)
			}
			h, err := startHost(ctx, c, log, hostConfig{
				dataDir: dataDir, blob: blob, queue: queue, hostQueue: hostQueue,
				providers: providers, reapEvery: reapEvery, outputRetention: outputRetention,
			})
			if err != nil {
				return err
			}
			defer h.close()
			log.Info("berth worker is ready", "address", opts.HostPort, "namespace", opts.Namespace,
				"queue", queue, "host-queue", h.worker.HostQueue, "providers", providers)
			<-ctx.Done()
			log.Info("berth worker is stopping")
			return nil
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", defaultDataDir(), "where sandboxes (and a file blob store) live")
	cmd.Flags().StringVar(&blob, "blob", "", "blob store URL for outputs (file://, s3://...); default a directory in --data-dir")
	cmd.Flags().StringVar(&queue, "queue", sandbox.DefaultQueue, "the task queue every berth worker polls")
	cmd.Flags().StringVar(&hostQueue, "host-queue", "", "this host's own task queue (default QUEUE@hostname)")
	cmd.Flags().StringSliceVar(&providers, "provider", []string{linux.Name}, "providers to serve")
	cmd.Flags().DurationVar(&reapEvery, "reap-every", defaultReapEvery, "how often to destroy this host's sandboxes whose owner is gone; 0 for never")
	cmd.Flags().DurationVar(&outputRetention, "output-retention", transfer.DefaultOutputRetention, "how long sandboxes' outputs are kept after their owner workflow closed")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log more")
	return cmd
}
