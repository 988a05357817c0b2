package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider"
)

// berth providers shows every host's providers, one row each, and a
// host that did not answer as one unreachable row; its JSON keeps the
// fields of a provider's status.
func TestProviderRows(t *testing.T) {
	hosts := []berth.HostProviders{
		{Host: "berth@a", Providers: []provider.Availability{
			{Name: "docker", Available: true, Capabilities: &provider.Capabilities{Pause: true, HostBound: true},
				Note: "default image berth-host:1-v1: not made: too big\n\x1b[31m"},
			{Name: "gvisor", Reason: "runsc\nnot found"},
		}},
		{Host: "berth@b", Unreachable: true, Error: "no worker took the question within 5s"},
		{Host: "berth@c", Providers: []provider.Availability{
			{Name: "e2b", Available: true, Capabilities: &provider.Capabilities{Pause: true, Image: true},
				ServiceError: "e2b: check (list sandboxes): dial tcp 127.0.0.1:9: connect: connection refused\nmore", ServiceKind: errdefs.ProviderUnavailable},
			{Name: "daytona", Available: true, Capabilities: &provider.Capabilities{Image: true},
				ServiceError: "daytona: 401 Unauthorized: \x1b[31mbad key", ServiceKind: errdefs.ProviderAuth},
			{Name: "linux", Available: true, Capabilities: &provider.Capabilities{}},
		}},
	}
	rows := append(providerRows(hosts), modelRow(model.Status{Model: "qwen3", Server: "127.0.0.1:8000", State: model.Unavailable,
		Reason: "model: 127.0.0.1:8000 unreachable: connection refused: start it"}))
	var table bytes.Buffer
	if err := printProviders(&table, rows); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PROVIDER  STATUS       HOST     DETAILS",
		"docker    ready        berth@a  pause,host-bound; default image berth-host:1-v1: not made: too big ...",
		"gvisor    unavailable  berth@a  runsc ...",
		"-         unreachable  berth@b  no worker took the question within 5s",
		"e2b       unreachable  berth@c  e2b: check (list sandboxes): dial tcp 127.0.0.1:9: connect: connection refused ...",
		"daytona   refused      berth@c  daytona: 401 Unauthorized: bad key",
		"linux     ready        berth@c",
		"model qwen3 at 127.0.0.1:8000: unavailable: model: 127.0.0.1:8000 unreachable: connection refused: start it",
	}
	for i, line := range strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n") {
		if i >= len(want) || strings.TrimRight(line, " ") != want[i] {
			t.Errorf("table line %d: %q\nwhole:\n%s", i, line, table.String())
		}
	}

	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("JSON: %s, want 7 rows", b)
	}
	if r := got[0]; r["name"] != "docker" || r["status"] != "ready" || !strings.Contains(r["note"].(string), "not made") || r["host"] != "berth@a" || r["available"] != true || r["capabilities"].(map[string]any)["host_bound"] != true || r["unreachable"] != nil {
		t.Errorf("JSON of a ready provider: %v", r)
	}
	if r := got[2]; r["name"] != "" || r["host"] != "berth@b" || r["available"] != false || r["unreachable"] != true || r["reason"] == "" {
		t.Errorf("JSON of an unreachable host: %v", r)
	}
	if r := got[3]; r["name"] != "e2b" || r["status"] != "unreachable" || r["available"] != true || r["unreachable"] != nil ||
		r["service_kind"] != "ProviderUnavailable" || !strings.HasPrefix(r["service_error"].(string), "e2b: check") {
		t.Errorf("JSON of a provider whose service did not answer: %v", r)
	}
	if r := got[4]; r["name"] != "daytona" || r["status"] != "refused" || r["service_kind"] != "ProviderAuth" || r["service_error"] == "" {
		t.Errorf("JSON of a provider whose service refused the key: %v", r)
	}
	if r := got[5]; r["status"] != "ready" || r["service_error"] != nil || r["service_kind"] != nil {
		t.Errorf("JSON of a ready provider without a service: %v", r)
	}
	if r := got[6]; r["name"] != "" || r["status"] != "unavailable" || r["available"] != false || r["model"] == nil ||
		r["model"].(map[string]any)["model"] != "qwen3" || r["model"].(map[string]any)["server"] != "127.0.0.1:8000" {
		t.Errorf("JSON of the model: %v", r)
	}

	for _, tt := range []struct {
		st   model.Status
		line string
	}{
		{model.Status{Model: "m", Server: "h:1", State: model.Ready}, "model m at h:1: ready"},
		{model.Status{Model: "m", Server: "h:1", State: model.Unknown, Reason: "model: h:1: the server lists no models; the first call will tell"},
			"model m at h:1: unknown: model: h:1: the server lists no models; the first call will tell"},
		{model.Status{State: model.None, Reason: "no model configured: set BERTH_MODEL"}, "model: none: no model configured: set BERTH_MODEL"},
		// The server's words cannot act on the terminal.
		{model.Status{Model: "m", Server: "h:1", State: model.Unavailable, Reason: "model: h:1 answered 500: \x1b]0;owned\x07oops"},
			"model m at h:1: unavailable: model: h:1 answered 500: oops"},
	} {
		if got := modelLine(&tt.st); got != tt.line {
			t.Errorf("model line %q, want %q", got, tt.line)
		}
	}
}
