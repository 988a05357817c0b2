package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/transfer"
)

func newDev() *cobra.Command {
	var (
		dataDir                                 string
		observe                                 observeFlags
		port                                    int
		uiPort                                  int
		verbose                                 bool
		reapEvery, outputRetention, stopTimeout time.Duration
		providers                               providerFlags
		capacity                                capacityFlags
		cache                                   cacheFlag
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run an embedded Temporal server and a berth worker, in one process",
		Long: `berth dev runs a Temporal server whose state lives in a SQLite file in the
data directory, so that workflows go on after a restart, and a berth
worker serving every provider that works on this host (berth providers
tells which, and why not the others). Its server is its own, on
127.0.0.1: the connection flags of the other commands are not its.

The coding agent's model is optional and comes from the environment:
  BERTH_MODEL       the model's name at the server (none: no agent model)
  OPENAI_API_KEY    the server's key (a local server may need none)
  OPENAI_BASE_URL   an OpenAI-compatible server (vLLM, Ollama, llama.cpp,
                    LiteLLM); default https://api.openai.com/v1
A model server that is down or lists no models does not stop berth dev:
it says so in one line, sessions try the model at each call, and berth
providers shows its state.

Hosted providers take their keys from the environment too; e2b is served
when E2B_API_KEY holds the team's key (docs/providers/e2b.md).

` + observeHelp + `

` + stoppingHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(verbose)
			cached := cache.apply()
			obs, err := observe.start(ctx, "berth-dev", log)
			if err != nil {
				return err
			}
			defer obs.close()
			srv, err := devserver.Start(ctx, devserver.Options{
				DataDir: filepath.Join(dataDir, "temporal"),
				Address: fmt.Sprintf("127.0.0.1:%d", port),
				UIPort:  uiPort,
				Logger:  log,
			})
			if err != nil {
				return err
			}
			defer srv.Stop()
			opts := srv.ClientOptions()
			opts.Logger = hostworker.Logger(log.With("component", "sdk"))
			obs.apply(&opts)
			c, err := client.Dial(opts)
			if err != nil {
				return err
			}
			defer c.Close()
			// One host: creation and operations share a queue, so the
			// server hands activities to this worker eagerly.
			cfg := hostworker.HostConfig{
				DataDir: dataDir, Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
				Providers: providers.names, ProviderConfig: providers.config,
				ReapEvery: reapEvery, OutputRetention: outputRetention, Logger: log,
				StopTimeout: hostStopTimeout(stopTimeout), OrphanSampling: orphanSampling(observe.address),
				Telemetry: obs.telemetry, Tracer: obs.tracer,
			}
			capacity.config(&cfg)
			if capacity.rawMemory == "" {
				// One machine, the developer's: sandboxes' memory limits
				// are ceilings, not reservations, and a bound on their
				// sum would stop berth dev at ten default sandboxes.
				cfg.MaxMemory = -1
			}
			h, err := hostworker.StartHost(ctx, c, cfg)
			if err != nil {
				return err
			}
			defer h.Close()
			obs.serve(h, log)
			if err := startSessions(ctx, c); err != nil {
				return err
			}
			attrs := []any{"address", srv.Address(), "namespace", srv.Namespace(), "data", dataDir, "providers", h.Providers(), "workflow-cache", cached}
			if srv.UIAddress() != "" {
				attrs = append(attrs, "ui", "http://"+srv.UIAddress())
			}
			log.Info("berth dev is ready", attrs...)
			<-ctx.Done()
			return shutdown(ctx, h, log, "berth dev", stopTimeout)
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", hostworker.DefaultDataDir(), "where the server's database, sandboxes and outputs live")
	cmd.Flags().IntVar(&port, "port", 7233, "the Temporal frontend's port on 127.0.0.1")
	cmd.Flags().IntVar(&uiPort, "ui-port", 8233, "the Temporal Web UI's port; 0 for none")
	cmd.Flags().DurationVar(&reapEvery, "reap-every", hostworker.DefaultReapEvery, "how often to destroy sandboxes whose owner is gone; 0 for never")
	cmd.Flags().DurationVar(&outputRetention, "output-retention", transfer.DefaultOutputRetention, "how long sandboxes' outputs are kept after their owner workflow closed")
	observe.register(cmd)
	cmd.Flags().DurationVar(&stopTimeout, "stop-timeout", hostworker.DefaultStopTimeout, "on SIGTERM or SIGINT, how long idle sandboxes may take to hibernate (waiting for their commands), then how long commands still under way may finish before their sandboxes are paused; 0 for none")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log more")
	providers.register(cmd)
	capacity.register(cmd, "no bound")
	cache.register(cmd)
	return cmd
}

// startSessions starts the coding agent's session manager, unless it
// runs, with its sessions asking for the model on this host's own queue:
// the server then hands each model call to this worker in its reply to
// the workflow task that schedules it (eager dispatch), which saves a
// few milliseconds a tool call (docs/agent.md, "berth's overhead per tool
// call"). A host among several cannot: a host without a model would be
// handed model calls. Clients' update-with-start finds it running.
func startSessions(ctx context.Context, c client.Client) error {
	in := session.ManagerInput{Session: agent.SessionInput{ModelQueue: sandbox.DefaultQueue}}
	_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: session.DefaultManagerID, TaskQueue: sandbox.DefaultQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		StaticSummary:            session.ManagerSummary,
	}, session.WorkflowName, in)
	if err != nil {
		return fmt.Errorf("start the session manager: %w", err)
	}
	return nil
}
