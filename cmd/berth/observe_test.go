package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/testkit"
)

// TestSessionShowSeconds: session show says how long the session's
// sandbox was held and active, the running stretch counted up to now,
// in its text and in its JSON.
func TestSessionShowSeconds(t *testing.T) {
	var st agent.State
	st.Status, st.Sandbox.State = "idle", "running"
	st.Sandbox.Held, st.Sandbox.Active = 2500*time.Millisecond, 250*time.Millisecond
	var b bytes.Buffer
	if err := printState(&b, "s1", st); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(b.String(), "\n"); first != "session s1: idle, sandbox running (held 2.5s, active 0.25s), 0 messages, 0 tokens" {
		t.Errorf("first line: %q", first)
	}
	now := time.Now()
	st.Sandbox.HeldSince = now.Add(-time.Minute)
	held, active := sandboxSeconds(st, now)
	if held != 62.5 || active != 0.25 {
		t.Errorf("held %v, active %v; want 62.5 (2.5 and the minute since) and 0.25", held, active)
	}
	out, err := json.Marshal(shownState{State: st, HeldSeconds: held, ActiveSeconds: active})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if back["held_seconds"] != 62.5 || back["active_seconds"] != 0.25 || back["status"] != "idle" || back["sandbox"] == nil {
		t.Errorf("session show -o json: %s", out)
	}
}

// TestDevObserved: berth dev with --metrics-address serves the SDK's and
// berth's metrics over HTTP, counting the command a client ran; with
// OTEL_EXPORTER_OTLP_ENDPOINT set, berth dev and the berth command both
// export their spans to the collector it names: the client's update and
// the host's provider call.
func TestDevObserved(t *testing.T) {
	var (
		mu    sync.Mutex
		spans []byte
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		spans = append(spans, b...)
		mu.Unlock()
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog, "--provider", "linux", "--metrics-address", "127.0.0.1:0")
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stopDev(t, dev, &devLog)
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := runBerth(t, berth, append([]string{"--address", addr}, args...)...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s\n%s", strings.Join(args, " "), code, out, errOut, devLog.String())
		}
		return out
	}
	id := strings.TrimSpace(ok("sandbox", "create", "--provider", "linux", "--no-idle-timeout"))
	ok("sandbox", "exec", id, "--", "true")

	m := regexp.MustCompile(`url=(http://\S+/metrics)`).FindStringSubmatch(devLog.String())
	if m == nil {
		t.Fatalf("berth dev did not say where its metrics are:\n%s", devLog.String())
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`berth_exec_seconds_count{provider="linux"} 1` + "\n",
		`berth_sandbox_create_seconds_count{provider="linux"} 1` + "\n",
		`berth_sandboxes{provider="linux",state="running"} 1` + "\n",
		"# TYPE temporal_request_total counter\n",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the metrics lack %q:\n%s", want, body)
		}
	}
	ok("sandbox", "rm", id)
	stopDev(t, dev, &devLog) // flushes berth dev's spans
	stopped = true
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"UpdateWorkflow:berth.exec", "RunActivity:ExecLocal", "provider.exec", "provider.create", "berth-dev"} {
		if !bytes.Contains(spans, []byte(want)) {
			t.Errorf("the collector got no span naming %q", want)
		}
	}
}
