package hostworker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/workflows"
)

// scrape reads the metrics a host serves over HTTP, by family name.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the metrics: %v", err)
	}
	return fams
}

// sample finds the sample of family name whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m
	}
	return nil
}

// value is a counter's or a gauge's value, or -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	m := sample(fams, name, labels)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

// count is a histogram's count of observations, or -1 when there is
// none.
func count(fams map[string]*dto.MetricFamily, name string, labels map[string]string) int {
	m := sample(fams, name, labels)
	if m == nil || m.Histogram == nil {
		return -1
	}
	return int(m.Histogram.GetSampleCount())
}

// TestMetrics: after real operations on a host (sandboxes made on the
// linux provider, commands, a snapshot, a destroy, a reaper's pass), the
// host's /metrics says exactly what happened: sandboxes by state,
// creations and commands counted in their histograms, held and active
// seconds within what the wall clock allows, snapshot and blob store
// bytes, the reaper's actions; the Temporal SDK's own metrics beside
// them, and the orphan counter still there.
func TestMetrics(t *testing.T) {
	ctx := t.Context()
	tel, err := hostworker.NewTelemetry(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	opts := testserver.Options(t)
	opts.MetricsHandler = tel.SDKMetrics()
	tc, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	began := time.Now()
	h, err := hostworker.StartHost(ctx, tc, hostworker.HostConfig{DataDir: shortDataDir(t), Providers: []string{"linux"},
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue, Telemetry: tel})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	srv := httptest.NewServer(h.MetricsHandler())
	defer srv.Close()

	c := berth.New(tc)
	create := func(id string) *berth.Sandbox {
		sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{ID: id, Provider: "linux",
			IdleTimeout: berth.Never, HibernateAfter: berth.Never})
		if err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
		t.Cleanup(func() { sb.Stop(context.Background()) })
		return sb
	}
	kept, stopped := create("m-kept"), create("m-stopped")
	create("m-orphan")    // its owner is terminated below, and the reaper destroys it
	const big = 600 << 10 // past what results carry inline: stored in the blob store
	for _, argv := range [][]string{
		{"true"},
		{"sh", "-c", "sleep 0.3"},
		{"head", "-c", fmt.Sprint(big), "/dev/zero"},
	} {
		res, err := kept.Exec(ctx, argv, berth.ExecOptions{})
		if err != nil || !res.OK() {
			t.Fatalf("exec %v: %+v, %v", argv, res, err)
		}
	}
	file := make([]byte, 200<<10)
	rand.Read(file) // incompressible: the snapshot stores about as much
	if err := kept.WriteFiles(ctx, berth.File{Path: "data", Data: file}); err != nil {
		t.Fatal(err)
	}
	snap, err := kept.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stopped.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tc.TerminateWorkflow(ctx, "m-orphan", "", "orphaned"); err != nil {
		t.Fatal(err)
	}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: sandbox.DefaultQueue}, workflows.Reaper,
		workflows.ReaperInput{Queue: sandbox.DefaultQueue})
	if err != nil {
		t.Fatal(err)
	}
	var report sandbox.ReapReport
	if err := run.Get(ctx, &report); err != nil || len(report.Sandboxes) != 1 {
		t.Fatalf("reap: %+v, %v; want the orphan destroyed", report, err)
	}
	elapsed := time.Since(began).Seconds()

	linux := map[string]string{"provider": "linux"}
	var fams map[string]*dto.MetricFamily
	// The stopped sandbox's workflow destroys it after answering.
	testkit.Eventually(t, "one sandbox left running", 30*time.Second, func() bool {
		fams = scrape(t, srv.URL)
		return value(fams, "berth_sandboxes", map[string]string{"provider": "linux", "state": "running"}) == 1
	})
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{"berth_sandbox_create_seconds count", float64(count(fams, "berth_sandbox_create_seconds", linux)), 3},
		{"berth_exec_seconds count", float64(count(fams, "berth_exec_seconds", linux)), 3},
		{"berth_snapshot_seconds count (user)", float64(count(fams, "berth_snapshot_seconds", map[string]string{"provider": "linux", "kind": "user"})), 1},
		{"berth_reaper_sandboxes_total destroyed",
			value(fams, "berth_reaper_sandboxes_total", map[string]string{"provider": "linux", "action": "destroyed"}), 1},
		{"berth_reaper_sandboxes_total kept",
			value(fams, "berth_reaper_sandboxes_total", map[string]string{"provider": "linux", "action": "kept"}), 1},
		{"berth_orphaned_sandbox_seconds_total", value(fams, "berth_orphaned_sandbox_seconds_total", nil), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if v := value(fams, "berth_sandbox_active_seconds_total", linux); v < 0.3 || v > elapsed {
		t.Errorf("berth_sandbox_active_seconds_total = %v, want from 0.3 (a command slept that long) to %v (the test's time)", v, elapsed)
	}
	if v := value(fams, "berth_sandbox_held_seconds_total", linux); v <= 0 || v > 3*elapsed {
		t.Errorf("berth_sandbox_held_seconds_total = %v, want above 0 and at most %v (3 sandboxes)", v, 3*elapsed)
	}
	stored := value(fams, "berth_snapshot_stored_bytes_total", map[string]string{"provider": "linux", "kind": "user"})
	if stored < float64(len(file)) {
		t.Errorf("berth_snapshot_stored_bytes_total = %v, want at least the %d incompressible bytes snapshotted", stored, len(file))
	}
	if v := value(fams, "berth_blob_written_bytes_total", map[string]string{"kind": "snapshot"}); v != stored {
		t.Errorf("berth_blob_written_bytes_total{kind=snapshot} = %v, want the snapshot's %v", v, stored)
	}
	if v := value(fams, "berth_blob_written_bytes_total", map[string]string{"kind": "output"}); v != big {
		t.Errorf("berth_blob_written_bytes_total{kind=output} = %v, want the %d bytes of the one output stored", v, big)
	}
	// The SDK's own, through the same registry.
	if n := count(fams, "temporal_activity_execution_latency_seconds", map[string]string{"activity_type": "Create"}); n < 3 {
		t.Errorf("temporal_activity_execution_latency_seconds{activity_type=Create} count = %d, want at least 3", n)
	}
	if v := value(fams, "temporal_workflow_completed_total", map[string]string{"workflow_type": "Reaper"}); v != 1 {
		var text bytes.Buffer
		if f := fams["temporal_workflow_completed_total"]; f != nil {
			expfmt.MetricFamilyToText(&text, f)
		}
		t.Errorf("temporal_workflow_completed_total{workflow_type=Reaper} = %v, want 1 (the reaper's pass):\n%s", v, text.String())
	}

	// A sandbox made from the snapshot reads back what it stored.
	restored, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{ID: "m-restored", Provider: "linux",
		IdleTimeout: berth.Never, HibernateAfter: berth.Never, FromSnapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Stop(context.Background())
	fams = scrape(t, srv.URL)
	if v := value(fams, "berth_blob_read_bytes_total", map[string]string{"kind": "snapshot"}); v != stored {
		t.Errorf("berth_blob_read_bytes_total{kind=snapshot} = %v after a restore, want the snapshot's %v", v, stored)
	}
	if n := count(fams, "berth_sandbox_create_seconds", linux); n != 4 {
		t.Errorf("berth_sandbox_create_seconds count = %d after a fourth sandbox, want 4", n)
	}

	var text bytes.Buffer
	for _, f := range []string{"berth_sandboxes", "berth_exec_seconds"} {
		if fams[f] != nil {
			expfmt.MetricFamilyToText(&text, fams[f])
		}
	}
	t.Logf("a few of the metrics:\n%s", text.String())
}
