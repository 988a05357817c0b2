package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
)

// TestDevModelOptional starts berth dev with its model server down, and
// again with one that answers GET /models with 501: berth dev starts
// each time, says in one line what is wrong with the model, serves
// sandboxes, shows the model's state in berth providers, and a session
// works once the model server is up.
func TestDevModelOptional(t *testing.T) {
	model := fakemodel.NewDown(t)
	t.Setenv("BERTH_MODEL", fakemodel.Model)
	t.Setenv("OPENAI_BASE_URL", model.URL)
	t.Setenv("OPENAI_API_KEY", fakemodel.Key)
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	dumpOnFailure(t, "berth dev", &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })

	testkit.Eventually(t, "berth dev to say the model is not usable", 30*time.Second, func() bool {
		return strings.Contains(devLog.String(), "the coding agent's model is not usable now")
	})
	if line := logLine(devLog.String(), "not usable now"); !strings.Contains(line, "unreachable") || !strings.Contains(line, "OPENAI_BASE_URL") {
		t.Errorf("berth dev said %q; want why (unreachable) and what to do", line)
	}
	if out := runOK(t, berth, "run", "--address", addr, "--", "echo", "sandboxed"); out != "sandboxed\n" {
		t.Errorf("berth run with the model down: %q", out)
	}
	providers := func(want string) {
		t.Helper()
		out := runOK(t, berth, "providers", "--address", addr)
		if line := logLine(out, "model "+fakemodel.Model); !strings.HasPrefix(line, want) {
			t.Errorf("berth providers:\n%s\nwant a line starting %q", out, want)
		}
	}
	host := strings.TrimSuffix(strings.TrimPrefix(model.URL, "http://"), "/v1")
	providers(fmt.Sprintf("model %s at %s: unavailable: model: %s unreachable", fakemodel.Model, host, host))
	var rows []map[string]any
	if err := json.Unmarshal([]byte(runOK(t, berth, "providers", "--address", addr, "-o", "json")), &rows); err != nil || len(rows) == 0 ||
		rows[len(rows)-1]["status"] != "unavailable" || rows[len(rows)-1]["model"] == nil {
		t.Errorf("berth providers -o json: %v %v; want the model's row last, unavailable", rows, err)
	}

	model.Up(t)
	providers(fmt.Sprintf("model %s at %s: ready", fakemodel.Model, host))
	model.NoModelList(http.StatusNotImplemented)
	providers(fmt.Sprintf("model %s at %s: unknown", fakemodel.Model, host))

	// Started again with a server that lists no models (501).
	stopDev(t, dev, &devLog)
	var again testkit.SyncBuffer
	dev, _ = startDev(t, berth, data, port, &again)
	dumpOnFailure(t, "berth dev, started again", &again)
	testkit.Eventually(t, "berth dev to say the model's state", 30*time.Second, func() bool {
		return strings.Contains(again.String(), "state=unknown")
	})

	s := &sessionCLI{t: t, berth: berth, addr: addr, model: model, data: data}
	id := strings.TrimSpace(s.ok("new"))
	model.Script(fakemodel.Reply{Text: "Up at last."})
	if out := s.ok("send", id, "hello"); !strings.HasSuffix(out, "Up at last.\n") {
		t.Errorf("a session once the model is up: %q", out)
	}
}

// logLine is the first line of out that holds s.
func logLine(out, s string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
