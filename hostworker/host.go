package hostworker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer/relay"
	"github.com/berth-dev/berth/workflows"
)

// HostConfig is what a worker host serves, and how.
type HostConfig struct {
	// DataDir holds the host's state: a directory per provider (its
	// "state-dir") and, by default, the blob store.
	DataDir string
	// Blob is the blob store's URL (file://, s3://, gs://, azblob://,
	// for the drivers the binary links); outputs and snapshots go there.
	// Empty means a directory in DataDir.
	Blob string
	// Queue and HostQueue are as in Options.
	Queue, HostQueue string
	// Workflows are as in Options: registered beside berth's own.
	Workflows []any
	// Providers are the names of the providers to serve, opened with
	// provider.Open; empty means every provider the binary links that
	// opens on this host. ProviderConfig holds their settings by name.
	// Each gets "state-dir", a directory of its own in DataDir, unless
	// its settings name one.
	Providers      []string
	ProviderConfig map[string]provider.Config
	// ReapEvery is how often the host's reaper runs; zero means never.
	ReapEvery time.Duration
	// OutputRetention is how long sandboxes' outputs outlive their
	// owner; zero means the activities' default.
	OutputRetention time.Duration
	// Logger receives the host's and its providers' events; nil
	// discards them.
	Logger *slog.Logger
	// StopTimeout is how long Shutdown lets the commands under way
	// finish before it pauses their sandboxes; zero means
	// DefaultStopTimeout, a negative value not at all.
	StopTimeout time.Duration
	// HeartbeatTimeout is as in Options.
	HeartbeatTimeout time.Duration
	// StoreRetry is how long a request the blob store fails, or leaves
	// unanswered past snapshot.DefaultRequestTimeout, is retried before
	// a snapshot, a checkpoint or a restore fails with kind
	// StoreUnavailable (snapshot.WithRetry); zero means
	// snapshot.DefaultRetry.
	StoreRetry time.Duration
	// StoreRequestTimeout bounds each request to the blob store of
	// snapshots (snapshot.WithRequestTimeout); zero means
	// snapshot.DefaultRequestTimeout.
	StoreRequestTimeout time.Duration
	// MaxSandboxes bounds the sandboxes of the host-bound providers the
	// host holds (Options.MaxSandboxes); zero means no bound.
	MaxSandboxes int
	// MaxMemory bounds the sum of their memory limits, in bytes
	// (Options.MaxMemory); zero means DefaultMaxMemory, the host's
	// memory less MemoryReserve, and a negative value no bound.
	MaxMemory int64
	// MinFreeDisk is the free space the host keeps on its data
	// directory's file system, where its sandboxes' workspaces live:
	// with less, it takes no new sandbox (placement skips it, and a
	// creation sent to it is refused as for the other bounds). Zero
	// means activities.DefaultMinFreeDisk of the file system's size (a
	// twentieth, at least 1 GiB, at most a tenth), a negative value no
	// bound.
	MinFreeDisk int64
	// OrphanSampling, when set, is how often the host counts its
	// orphaned sandboxes (OrphanedSeconds, MetricsHandler), and lists
	// its sandboxes for the held seconds of its metrics between scrapes;
	// zero means it does neither.
	OrphanSampling time.Duration
	// Telemetry receives the host's metrics, which MetricsHandler
	// serves; nil means a Telemetry of the host's own, without the
	// Temporal SDK's metrics (those come from a Telemetry whose
	// SDKMetrics the client was dialed with).
	Telemetry *Telemetry
	// Tracer makes a span around each provider call, under the
	// activity's (docs/observability.md); nil traces none.
	Tracer trace.TracerProvider
	// Model is the model the coding agent calls; nil means the one the
	// environment names (model.ConfigFromEnv), if BERTH_MODEL is set.
	// The model is optional: a model set but not usable (no key, a
	// server down, a model it does not serve) is logged in one line,
	// and each call tries it again; the host serves its sandboxes all
	// the same.
	Model *model.Config
}

// Host is what runs on one machine of berth: its providers, its blob
// store and its Temporal workers.
type Host struct {
	*Worker
	providers []provider.Provider
	buckets   []*blob.Bucket
	parked    *activities.Parked
	log       *slog.Logger
	bg        context.Context    // the host's background work: the model's first check, the reaper's pass at start
	stop      context.CancelFunc // ends bg
	orphans   *orphans           // nil unless counted
	telemetry *Telemetry
	ownTel    bool // telemetry is the host's own, closed with it
	client    client.Client
	drainFor  time.Duration // how long Shutdown waits for its idle sandboxes to hibernate
	stopped   bool          // the workers are stopped
	closed    bool
}

// StartHost opens the providers and blob store cfg names, starts the
// workers, and starts the host's reaper. Close undoes it.
func StartHost(ctx context.Context, c client.Client, cfg HostConfig) (*Host, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := prepareDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	h := &Host{log: cfg.Logger, client: c, drainFor: stopTimeout(cfg.StopTimeout)}
	h.bg, h.stop = context.WithCancel(ctx)
	parked, err := activities.OpenParked(filepath.Join(cfg.DataDir, ParkedFile))
	if err != nil {
		h.Close()
		return nil, err
	}
	h.parked = parked
	ps := map[string]provider.Provider{}
	var unavailable []provider.Availability
	// Named providers must open; by default the host serves every
	// provider its binary links that opens here, and says why not of
	// the others.
	names, required := cfg.Providers, true
	if len(names) == 0 {
		names, required = provider.Names(), false
	}
	for _, name := range names {
		if _, dup := ps[name]; dup {
			continue
		}
		pc := provider.Config{"state-dir": filepath.Join(cfg.DataDir, name)}
		for k, v := range cfg.ProviderConfig[name] {
			pc[k] = v
		}
		p, err := provider.Open(provider.WithLogger(ctx, cfg.Logger.With("provider", name)), name, pc)
		if err != nil && required {
			h.Close()
			return nil, err
		}
		if err != nil {
			cfg.Logger.Info("provider not served", "provider", name, "reason", err)
			unavailable = append(unavailable, provider.Availability{Name: name, Reason: err.Error()})
			continue
		}
		h.providers = append(h.providers, p)
		ps[name] = p
	}
	if len(ps) == 0 {
		h.Close()
		return nil, fmt.Errorf("hostworker: no provider could be opened: %v", unavailable)
	}
	if cfg.Blob == "" {
		cfg.Blob = "file://" + filepath.Join(cfg.DataDir, "blobs")
	}
	outputs, err := OpenBucket(ctx, cfg.Blob)
	if err != nil {
		h.Close()
		return nil, err
	}
	h.buckets = append(h.buckets, outputs)
	// A bucket of its own: PrefixedBucket takes over the one it wraps.
	snaps, err := OpenBucket(ctx, cfg.Blob)
	if err != nil {
		h.Close()
		return nil, err
	}
	snaps = blob.PrefixedBucket(snaps, SnapshotPrefix)
	h.buckets = append(h.buckets, snaps)
	h.telemetry = cfg.Telemetry
	if h.telemetry == nil {
		if h.telemetry, err = NewTelemetry(cfg.Logger); err != nil {
			h.Close()
			return nil, err
		}
		h.ownTel = true
	}
	if err := h.telemetry.bind(h.providers, h.OrphanedSeconds); err != nil {
		h.Close()
		return nil, err
	}
	mcfg := cfg.Model
	env := model.ConfigFromEnv()
	if mcfg == nil && env.Model != "" {
		mcfg = &env
	}
	h.Worker, err = startWaitingForNamespace(ctx, c, cfg.Logger, func() (*Worker, error) {
		return StartWorker(c, Options{
			Model:     mcfg,
			Providers: ps, Outputs: outputs, Snapshots: snapshot.New(snaps, snapshot.WithRetry(cfg.StoreRetry), snapshot.WithRequestTimeout(cfg.StoreRequestTimeout)),
			Queue: cfg.Queue, HostQueue: cfg.HostQueue, Unavailable: unavailable,
			Relay:  relay.Limits{Sign: SharedStore(cfg.Blob)},
			Parked: parked, StopTimeout: stopTimeout(cfg.StopTimeout), HeartbeatTimeout: cfg.HeartbeatTimeout,
			Metrics: h.telemetry, Tracer: cfg.Tracer, Logger: cfg.Logger,
			MaxSandboxes: cfg.MaxSandboxes, MaxMemory: maxMemory(cfg.MaxMemory), Workflows: cfg.Workflows,
			DiskDir: cfg.DataDir, MinFreeDisk: cfg.MinFreeDisk,
		})
	})
	if err != nil {
		h.Close()
		return nil, err
	}
	var unnamed string // a model meant, not named
	switch {
	case mcfg != nil:
	case env.BaseURL != "":
		unnamed = "OPENAI_BASE_URL"
	case env.APIKey != "":
		unnamed = "OPENAI_API_KEY"
	}
	h.reportModel(cfg.Logger, unnamed)
	if err := h.reconcileAtStart(ctx); err != nil {
		h.Close()
		return nil, err
	}
	if cfg.OrphanSampling > 0 {
		h.orphans = &orphans{c: c, every: cfg.OrphanSampling, closed: map[string]time.Time{}, seen: map[string]time.Time{}}
		h.countOrphans(h.orphans)
		go h.telemetry.sampleEvery(h.bg, cfg.OrphanSampling)
	}
	if cfg.ReapEvery > 0 {
		in := workflows.ReaperInput{Queue: h.HostQueue, OutputRetention: cfg.OutputRetention, Every: cfg.ReapEvery}
		if err := startReaper(ctx, c, h.queue, in); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// Providers names the providers the host serves.
func (h *Host) Providers() []string {
	names := make([]string, 0, len(h.providers))
	for _, p := range h.providers {
		names = append(names, p.Name())
	}
	return names
}

// Close stops the workers and closes the providers and blob stores,
// leaving the sandboxes as they are (Shutdown pauses them).
func (h *Host) Close() {
	if h.closed {
		return
	}
	h.closed = true
	if h.stop != nil {
		h.stop()
	}
	if h.Worker != nil && !h.stopped {
		h.Stop()
		h.stopped = true
	}
	for _, b := range h.buckets {
		b.Close()
	}
	if h.ownTel {
		h.telemetry.Close()
	}
	for _, p := range h.providers {
		if c, ok := p.(io.Closer); ok {
			c.Close()
		}
	}
}

// reportModel checks the model in the background, so that a model
// server that is slow to answer does not hold the host's start, and
// says in one line what it found. unnamed is the variable (OPENAI_BASE_URL
// or OPENAI_API_KEY) set without BERTH_MODEL: someone meant the host to
// have a model.
func (h *Host) reportModel(log *slog.Logger, unnamed string) {
	ctx := h.bg
	go func() {
		st := h.ModelStatus(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case st.State == model.None && unnamed != "":
			log.Warn("the coding agent has no model: " + unnamed + " is set but BERTH_MODEL is not set: set it to a model the server serves")
		case st.State == model.None:
			log.Info("the coding agent has no model: set BERTH_MODEL, and OPENAI_API_KEY or OPENAI_BASE_URL, to give it one")
		case st.State == model.Unavailable:
			log.Warn("the coding agent's model is not usable now; sandboxes are served all the same, and each model call tries it again",
				"model", st.Model, "server", st.Server, "reason", st.Reason)
		case st.State == model.Unknown:
			log.Info("the coding agent's model", "model", st.Model, "server", st.Server, "state", st.State, "reason", st.Reason)
		default:
			log.Info("the coding agent's model", "model", st.Model, "server", st.Server, "state", st.State)
		}
	}()
}

// SnapshotPrefix is where snapshots live in the blob store.
const SnapshotPrefix = "snapshots/"

// DefaultReapEvery is how often a host's reaper runs by default.
const DefaultReapEvery = workflows.DefaultReapEvery

// prepareDataDir makes the data directory. Sandboxes reach their
// workspaces below it with ids of their own: it must be searchable (not
// readable) by others.
func prepareDataDir(dir string) error {
	if dir == "" {
		return errors.New("hostworker: no data directory")
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o001 == 0 {
		return os.Chmod(dir, fi.Mode().Perm()|0o011)
	}
	return nil
}

// DefaultDataDir is where a host keeps its state: the Temporal
// database of berth dev, sandboxes' state and the blob store.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/berth"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "berth")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "berth")
}

// SharedStore says whether the blob store url names one that front ends
// may reach themselves, with signed URLs (s3, gs, azblob): not a file
// store, which only the worker's machine has.
func SharedStore(url string) bool {
	for _, scheme := range []string{"s3://", "gs://", "azblob://"} {
		if strings.HasPrefix(url, scheme) {
			return true
		}
	}
	return false
}

// OpenBucket opens a blob store by URL, creating a file store's
// directory. Only the drivers the binary links (by blank imports of
// gocloud.dev/blob/...) are known. A file store whose URL does not say
// otherwise (a metadata parameter) is opened with metadata=skip: by
// default fileblob writes a sidecar file of attributes beside every
// object, with an MD5 of its bytes, and berth reads none of them (the
// one attribute it uses, ModTime, is the file's own), so every part of
// an output, upload or snapshot chunk paid for a second file and a hash.
func OpenBucket(ctx context.Context, url string) (*blob.Bucket, error) {
	if rest, ok := strings.CutPrefix(url, "file://"); ok {
		dir, query, _ := strings.Cut(rest, "?")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		url = withoutSidecars(url, query)
	}
	b, err := blob.OpenBucket(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("open blob store %s: %w", url, err)
	}
	return b, nil
}

// withoutSidecars adds metadata=skip to a file store's URL, whose query
// is query, unless the query sets metadata itself.
func withoutSidecars(url, query string) string {
	q, err := neturl.ParseQuery(query)
	switch {
	case err != nil || q.Has("metadata"):
		return url // a bad query is the opener's to report
	case query == "":
		return strings.TrimSuffix(url, "?") + "?metadata=skip"
	}
	return url + "&metadata=skip"
}

// startReaper starts this host's reaper (berth.Reaper), or tells the
// one running its settings: either way it makes a pass at once. Several
// workers of one host share it. The schedule that ran a reaper workflow
// every few minutes before berth.Reaper is deleted, so that it leaves
// no more workflows behind.
func startReaper(ctx context.Context, c client.Client, queue string, in workflows.ReaperInput) error {
	id := workflows.ReaperID(in.Queue)
	_, err := c.SignalWithStartWorkflow(ctx, id, workflows.SignalReap, in, client.StartWorkflowOptions{
		TaskQueue: queue, StaticSummary: workflows.ReaperSummary(in),
	}, workflows.ReaperWorkflowName, in)
	if err != nil {
		return fmt.Errorf("start the reaper: %w", err)
	}
	err = c.ScheduleClient().GetHandle(ctx, legacyReaperSchedule(in.Queue)).Delete(ctx)
	var missing *serviceerror.NotFound
	if err != nil && !errors.As(err, &missing) {
		return fmt.Errorf("delete the reaper's old schedule: %w", err)
	}
	return nil
}

// legacyReaperSchedule is the id of the schedule that ran a host's
// reaper before berth.Reaper.
func legacyReaperSchedule(hostQueue string) string { return "berth-reaper-" + hostQueue }
