package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/connflags"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer"
)

func newWorker() *cobra.Command {
	var (
		cf                              connflags.Flags
		dataDir, blob, queue, hostQueue string
		verbose                         bool
		observe                         observeFlags
		reapEvery, outputRetention      time.Duration
		stopTimeout, heartbeatTimeout   time.Duration
		storeRetry, storeRequestTimeout time.Duration
		providers                       providerFlags
		capacity                        capacityFlags
		cache                           cacheFlag
	)
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a berth worker against a Temporal cluster",
		Long: `berth worker joins a Temporal cluster or Temporal Cloud, configured as the
temporal CLI is: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
TLS settings and config-file profiles (TEMPORAL_PROFILE), or the flags
of the same names that every berth command takes. The coding agent's
model, optional, comes from BERTH_MODEL, OPENAI_API_KEY and
OPENAI_BASE_URL, as for berth dev (berth dev --help).

` + observeHelp + `

` + stoppingHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(verbose)
			cached := cache.apply()
			opts, err := cf.Options()
			if err != nil {
				return err
			}
			opts.Logger = hostworker.Logger(log.With("component", "sdk"))
			obs, err := observe.start(ctx, "berth-worker", log)
			if err != nil {
				return err
			}
			defer obs.close()
			obs.apply(&opts)
			c, err := connflags.Dial(ctx, opts)
			if err != nil {
				return err
			}
			defer c.Close()
			cfg := hostworker.HostConfig{
				DataDir: dataDir, Blob: blob, Queue: queue, HostQueue: hostQueue,
				Providers: providers.names, ProviderConfig: providers.config,
				ReapEvery: reapEvery, OutputRetention: outputRetention, Logger: log,
				StopTimeout: hostStopTimeout(stopTimeout), OrphanSampling: orphanSampling(observe.address),
				HeartbeatTimeout: heartbeatTimeout, Telemetry: obs.telemetry, Tracer: obs.tracer,
				StoreRetry: storeRetry, StoreRequestTimeout: storeRequestTimeout,
			}
			capacity.config(&cfg)
			h, err := hostworker.StartHost(ctx, c, cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			obs.serve(h, log)
			log.Info("berth worker is ready", "address", opts.HostPort, "namespace", opts.Namespace, "workflow-cache", cached,
				"queue", queue, "host-queue", h.HostQueue, "providers", h.Providers())
			<-ctx.Done()
			return shutdown(ctx, h, log, "berth worker", stopTimeout)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", hostworker.DefaultDataDir(), "where sandboxes (and a file blob store) live")
	cmd.Flags().StringVar(&blob, "blob", "", "blob store URL for outputs and snapshots (file://, s3://, gs://, azblob://); default a directory in --data-dir")
	cmd.Flags().StringVar(&queue, "queue", sandbox.DefaultQueue, "the task queue every berth worker polls")
	cmd.Flags().StringVar(&hostQueue, "host-queue", "", "this host's own task queue (default QUEUE@hostname)")
	cmd.Flags().DurationVar(&reapEvery, "reap-every", hostworker.DefaultReapEvery, "how often to destroy this host's sandboxes whose owner is gone; 0 for never")
	cmd.Flags().DurationVar(&outputRetention, "output-retention", transfer.DefaultOutputRetention, "how long sandboxes' outputs are kept after their owner workflow closed")
	observe.register(cmd)
	cmd.Flags().DurationVar(&stopTimeout, "stop-timeout", hostworker.DefaultStopTimeout, "on SIGTERM or SIGINT, how long idle sandboxes may take to hibernate (waiting for their commands), then how long commands still under way may finish before their sandboxes are paused; 0 for none")
	cmd.Flags().DurationVar(&heartbeatTimeout, "heartbeat-timeout", sandbox.DefaultHeartbeatTimeout, "how long a running command's heartbeat may be missing before the command is taken over by another worker")
	cmd.Flags().DurationVar(&storeRetry, "store-retry", snapshot.DefaultRetry, "how long a request the blob store fails or leaves unanswered is retried before a checkpoint, snapshot or restore fails with StoreUnavailable")
	cmd.Flags().DurationVar(&storeRequestTimeout, "store-request-timeout", snapshot.DefaultRequestTimeout, "how long one request to the blob store of snapshots (a chunk of at most 4 MiB) may take before it is given up on and retried")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log more")
	providers.register(cmd)
	capacity.register(cmd, "the host's memory less a reserve of 1Gi or a tenth, the larger")
	cache.register(cmd)
	// berth's connection flags: the berth command hands them over after
	// the command's name, wherever they were.
	cf.Register(cmd.Flags(), berth.DefaultRetryFor)
	return cmd
}

// providerFlags name the providers a host serves, and their settings.
type providerFlags struct {
	names  []string
	config map[string]provider.Config
	raw    []string
}

func (f *providerFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringSliceVar(&f.names, "provider", nil,
		fmt.Sprintf("providers to serve, each of which must open (default: every one linked that opens here: %s)", strings.Join(provider.Names(), ", ")))
	cmd.Flags().StringArrayVar(&f.raw, "provider-config", nil,
		"a provider's setting, as NAME.KEY=VALUE (linux.pool=4); repeatable")
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := f.parse(); err != nil {
			return usageError{err}
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

// parse reads --provider-config's NAME.KEY=VALUE settings.
func (f *providerFlags) parse() error {
	f.config = map[string]provider.Config{}
	for _, s := range f.raw {
		key, value, ok := strings.Cut(s, "=")
		name, key, ok2 := strings.Cut(key, ".")
		if !ok || !ok2 || name == "" || key == "" {
			return fmt.Errorf("--provider-config %q: want NAME.KEY=VALUE", s)
		}
		if f.config[name] == nil {
			f.config[name] = provider.Config{}
		}
		f.config[name][key] = value
	}
	for _, name := range f.names {
		if !slices.Contains(provider.Names(), name) {
			return fmt.Errorf("unknown provider %q (this berth-host has: %s)", name, strings.Join(provider.Names(), ", "))
		}
	}
	return nil
}
