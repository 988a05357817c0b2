package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionFrom reads the commit, its dirtiness and the Temporal
// versions from build information, a replaced module by its replacement.
func TestVersionFrom(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/berth-dev/berth", Version: "v0.3.0"},
		Deps: []*debug.Module{
			{Path: "go.temporal.io/sdk", Version: "v1.50.0"},
			{Path: "go.temporal.io/server", Version: "v1.32.1", Replace: &debug.Module{Path: "go.temporal.io/server", Version: "v1.32.2"}},
		},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}},
	}
	v := versionFrom(bi, "")
	want := versionInfo{Version: "v0.3.0", Commit: "abc123", Dirty: true, GoVersion: "go1.26.8", SDK: "v1.50.0", Server: "v1.32.2"}
	if v != want {
		t.Fatalf("got %+v, want %+v", v, want)
	}
	var b strings.Builder
	v.write(&b)
	if got := b.String(); got != "berth v0.3.0 (commit abc123, dirty)\ngo: go1.26.8\ntemporal sdk: v1.50.0\ntemporal server: v1.32.2\n" {
		t.Errorf("text: %q", got)
	}
	j, _ := json.Marshal(v)
	if string(j) != `{"version":"v0.3.0","commit":"abc123","dirty":true,"go_version":"go1.26.8","temporal_sdk_version":"v1.50.0","temporal_server_version":"v1.32.2"}` {
		t.Errorf("json: %s", j)
	}
	// Without the server linked in, no line and no field for it.
	bi.Deps = bi.Deps[:1]
	b.Reset()
	versionFrom(bi, "").write(&b)
	if strings.Contains(b.String(), "server") {
		t.Errorf("a binary without the server names one: %q", b.String())
	}
}

// A build without a module version ((devel): a work tree built with
// -buildvcs=false) says the version under development, or the one
// -ldflags set, which wins over the module's.
func TestVersionDevel(t *testing.T) {
	devel := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/berth-dev/berth", Version: "(devel)"}}
	tagged := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/berth-dev/berth", Version: "v0.3.0"}}
	for _, tt := range []struct {
		name   string
		bi     *debug.BuildInfo
		linked string
		want   string
	}{
		{"devel", devel, "", devVersion},
		{"devel, linked", devel, "v0.4.0", "v0.4.0"},
		{"module", tagged, "", "v0.3.0"},
		{"module, linked", tagged, "v0.4.0", "v0.4.0"},
		{"no build information", &debug.BuildInfo{}, "", devVersion},
	} {
		if got := versionFrom(tt.bi, tt.linked).Version; got != tt.want {
			t.Errorf("%s: version %q, want %q", tt.name, got, tt.want)
		}
	}
}
