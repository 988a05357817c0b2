package hostworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
)

// Telemetry is a host's metrics: the Temporal SDK's own (set
// SDKMetrics on the client's options before dialing) and berth's,
// measured by the host's activities, in one OpenTelemetry meter provider
// that Handler serves in Prometheus' text format. docs/observability.md
// lists them. Make one per host with NewTelemetry and give it to
// StartHost in HostConfig.Telemetry; a host given none makes its own,
// without the SDK's metrics.
type Telemetry struct {
	log *slog.Logger
	reg *prometheus.Registry
	mp  *sdkmetric.MeterProvider
	sdk client.MetricsHandler

	create, exec, snapTime metric.Float64Histogram
	snapStored             metric.Int64Counter
	blobWritten, blobRead  metric.Int64Counter

	start    time.Time
	sampling sync.Mutex // one listing of the providers at a time
	mu       sync.Mutex // guards what follows
	bound    bool
	ps       []provider.Provider
	orphans  func() float64
	held     map[string]float64       // held seconds so far, by provider
	active   map[string]float64       // active seconds so far, by provider
	counted  map[sandboxKey]time.Time // live sandbox -> until when its held time is counted
	running  map[sandboxKey]*running  // sandbox running commands
	states   map[[2]string]int        // (provider, state) -> sandboxes, as last listed
}

type sandboxKey struct{ provider, id string }

type running struct {
	n     int
	since time.Time
}

// Metric names, as Prometheus shows them.
const (
	metricSandboxes   = "berth_sandboxes"
	metricCreate      = "berth_sandbox_create_seconds"
	metricExec        = "berth_exec_seconds"
	metricHeld        = "berth_sandbox_held_seconds"   // _total
	metricActive      = "berth_sandbox_active_seconds" // _total
	metricSnapStored  = "berth_snapshot_stored_bytes"  // _total
	metricSnapTime    = "berth_snapshot_seconds"
	metricBlobWritten = "berth_blob_written_bytes" // _total
	metricBlobRead    = "berth_blob_read_bytes"    // _total
	metricOrphaned    = "berth_orphaned_sandbox_seconds"
)

// latencyBuckets are the histograms' bounds, in seconds: from a command
// on a warm sandbox (milliseconds) to a creation that pulls an image
// (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// listTimeout bounds one listing of a provider's sandboxes for the
// metrics: a hosted service that does not answer leaves its gauge as it
// was rather than hold a scrape.
const listTimeout = 10 * time.Second

// NewTelemetry makes a host's metrics; log receives what goes wrong
// measuring (nil: discarded). Close releases it.
func NewTelemetry(log *slog.Logger) (*Telemetry, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := &Telemetry{
		log: log, reg: prometheus.NewRegistry(), start: time.Now(),
		held: map[string]float64{}, active: map[string]float64{},
		counted: map[sandboxKey]time.Time{}, running: map[sandboxKey]*running{}, states: map[[2]string]int{},
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(t.reg), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return nil, fmt.Errorf("hostworker: metrics: %w", err)
	}
	// The SDK's timers are in seconds: give them buckets that are.
	seconds := sdkmetric.NewView(sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
		sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: latencyBuckets}})
	t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithView(seconds))
	t.sdk = temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter: t.mp.Meter("temporal-sdk-go"), UseMonotonicCounters: true,
		OnError: func(err error) { log.Warn("temporal sdk metric", "error", err) },
	})
	if err := t.instruments(t.mp.Meter("github.com/berth-dev/berth")); err != nil {
		t.mp.Shutdown(context.Background())
		return nil, fmt.Errorf("hostworker: metrics: %w", err)
	}
	// The worker process's own: its memory per sandbox is a figure
	// operators watch.
	t.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return t, nil
}

func (t *Telemetry) instruments(m metric.Meter) error {
	var err error
	hist := func(name, desc string) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(latencyBuckets...))
		err = errors.Join(err, e)
		return h
	}
	bytes := func(name, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("By"))
		err = errors.Join(err, e)
		return c
	}
	t.create = hist(metricCreate, "Time this host's providers took to create (or wake) a sandbox.")
	t.exec = hist(metricExec, "Wall time of the commands run in this host's sandboxes, as the host saw them.")
	t.snapTime = hist(metricSnapTime, "Time a snapshot (kind checkpoint or user) of a workspace took.")
	t.snapStored = bytes(metricSnapStored, "Compressed bytes snapshots added to the snapshot store.")
	t.blobWritten = bytes(metricBlobWritten, "Bytes this host's activities stored in the blob store.")
	t.blobRead = bytes(metricBlobRead, "Bytes this host's activities read from the blob store.")
	if err != nil {
		return err
	}
	gauge, err := m.Int64ObservableGauge(metricSandboxes,
		metric.WithDescription("Sandboxes this host's providers hold, by state, as listed at the scrape."))
	if err != nil {
		return err
	}
	held, err := m.Float64ObservableCounter(metricHeld, metric.WithUnit("s"),
		metric.WithDescription("Seconds this host's sandboxes existed (running or paused), sampled as they are listed."))
	if err != nil {
		return err
	}
	active, err := m.Float64ObservableCounter(metricActive, metric.WithUnit("s"),
		metric.WithDescription("Seconds this host's sandboxes ran at least one command."))
	if err != nil {
		return err
	}
	orphaned, err := m.Float64ObservableCounter(metricOrphaned, metric.WithUnit("s"),
		metric.WithDescription("Seconds this host's sandboxes were held with their owner workflow closed."))
	if err != nil {
		return err
	}
	_, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		now := time.Now()
		t.sample(ctx, now)
		t.mu.Lock()
		defer t.mu.Unlock()
		for k, n := range t.states {
			o.ObserveInt64(gauge, int64(n), metric.WithAttributes(attribute.String("provider", k[0]), attribute.String("state", k[1])))
		}
		for p, s := range t.held {
			o.ObserveFloat64(held, s, providerAttr(p))
		}
		// The commands under way count up to now.
		act := maps.Clone(t.active)
		for k, r := range t.running {
			act[k.provider] += now.Sub(r.since).Seconds()
		}
		for p, s := range act {
			o.ObserveFloat64(active, s, providerAttr(p))
		}
		if t.orphans != nil {
			o.ObserveFloat64(orphaned, t.orphans())
		}
		return nil
	}, gauge, held, active, orphaned)
	return err
}

func providerAttr(p string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("provider", p))
}

// SDKMetrics is the Temporal SDK's metrics handler, for the
// client.Options of the client the host's workers use: the SDK's metrics
// (temporal_*) then come out of Handler beside berth's.
func (t *Telemetry) SDKMetrics() client.MetricsHandler { return t.sdk }

// Handler serves the metrics in Prometheus' text format.
func (t *Telemetry) Handler() http.Handler {
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{t.log}})
}

// Close stops measuring.
func (t *Telemetry) Close() error { return t.mp.Shutdown(context.Background()) }

// bind makes t measure the sandboxes of ps, and the orphaned seconds
// orphans counts (nil: none). A Telemetry serves one host.
func (t *Telemetry) bind(ps []provider.Provider, orphans func() float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bound {
		return fmt.Errorf("hostworker: a Telemetry serves one host")
	}
	t.bound, t.ps, t.orphans = true, ps, orphans
	return nil
}

// sample lists the host's sandboxes: their numbers by state, and the
// time each was held since it was last counted (or since it was made,
// or since this process started, the first time).
func (t *Telemetry) sample(ctx context.Context, now time.Time) {
	t.sampling.Lock()
	defer t.sampling.Unlock()
	t.mu.Lock()
	ps := t.ps
	t.mu.Unlock()
	for _, p := range ps {
		lctx, cancel := context.WithTimeout(ctx, listTimeout)
		infos, err := p.List(lctx, nil)
		cancel()
		if err != nil {
			t.log.Debug("list sandboxes for the metrics", "provider", p.Name(), "error", err)
			continue
		}
		t.mu.Lock()
		for k := range t.states {
			if k[0] == p.Name() {
				t.states[k] = 0
			}
		}
		listed := map[sandboxKey]bool{}
		for _, info := range infos {
			t.states[[2]string{p.Name(), string(info.State)}]++
			key := sandboxKey{p.Name(), info.ID}
			if info.State != provider.StateRunning && info.State != provider.StatePaused {
				continue
			}
			listed[key] = true
			from, ok := t.counted[key]
			if !ok {
				from = info.CreatedAt
				if from.Before(t.start) {
					from = t.start
				}
			}
			t.held[p.Name()] += math.Max(0, now.Sub(from).Seconds())
			t.counted[key] = now
		}
		for key := range t.counted {
			if key.provider == p.Name() && !listed[key] {
				delete(t.counted, key) // gone without this host destroying it
			}
		}
		t.mu.Unlock()
	}
}

// sampleEvery samples the host's sandboxes every d until ctx ends, so
// that a sandbox's held time counts between scrapes too.
func (t *Telemetry) sampleEvery(ctx context.Context, d time.Duration) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			t.sample(ctx, now)
		}
	}
}

var _ activities.Metrics = (*Telemetry)(nil)

// Created implements activities.Metrics.
func (t *Telemetry) Created(p, id string, took time.Duration) {
	t.create.Record(context.Background(), took.Seconds(), providerAttr(p))
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.counted[sandboxKey{p, id}]; !ok {
		t.counted[sandboxKey{p, id}] = now
	}
}

// Destroyed implements activities.Metrics: the held time since the
// sandbox was last counted counts.
func (t *Telemetry) Destroyed(p, id string) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	key := sandboxKey{p, id}
	if from, ok := t.counted[key]; ok {
		t.held[p] += math.Max(0, now.Sub(from).Seconds())
		delete(t.counted, key)
	}
}

// CommandStarted implements activities.Metrics.
func (t *Telemetry) CommandStarted(p, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	key := sandboxKey{p, id}
	r := t.running[key]
	if r == nil {
		r = &running{since: time.Now()}
		t.running[key] = r
	}
	r.n++
}

// CommandEnded implements activities.Metrics.
func (t *Telemetry) CommandEnded(p, id string, took time.Duration) {
	t.exec.Record(context.Background(), took.Seconds(), providerAttr(p))
	t.mu.Lock()
	defer t.mu.Unlock()
	key := sandboxKey{p, id}
	r := t.running[key]
	if r == nil {
		return
	}
	if r.n--; r.n == 0 {
		t.active[p] += time.Since(r.since).Seconds()
		delete(t.running, key)
	}
}

// Snapshotted implements activities.Metrics.
func (t *Telemetry) Snapshotted(p, kind string, stored int64, took time.Duration) {
	attrs := metric.WithAttributes(attribute.String("provider", p), attribute.String("kind", kind))
	t.snapTime.Record(context.Background(), took.Seconds(), attrs)
	t.snapStored.Add(context.Background(), stored, attrs)
}

// BlobWritten implements activities.Metrics.
func (t *Telemetry) BlobWritten(kind string, n int64) {
	t.blobWritten.Add(context.Background(), n, metric.WithAttributes(attribute.String("kind", kind)))
}

// BlobRead implements activities.Metrics.
func (t *Telemetry) BlobRead(kind string, n int64) {
	t.blobRead.Add(context.Background(), n, metric.WithAttributes(attribute.String("kind", kind)))
}

// slogPrinter logs promhttp's errors.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("serve metrics", "error", fmt.Sprint(v...)) }
