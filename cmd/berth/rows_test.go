package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/berth-dev/berth"
)

// berth run ls shows how an ended run's command ended: the exit code
// berth run exits with, in STATE and as exit_code.
func TestRunRowExitCode(t *testing.T) {
	// The memo's decoding is the SDK's (TestRunInfoOf, package berth).
	info := func(status enumspb.WorkflowExecutionStatus, exit *berth.RunExit) berth.RunInfo {
		r := berth.RunInfo{ID: "run-1", Status: strings.ToLower(status.String()), Command: "sh -c exit 7"}
		if exit != nil {
			r.Ended, r.Exit = true, *exit
		}
		return r
	}
	for _, tt := range []struct {
		name  string
		info  berth.RunInfo
		state string
		code  string // exit_code in JSON; "" for none
	}{
		{"exited 7", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &berth.RunExit{ExitCode: 7}), "exited 7", "7"},
		{"exited 0", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &berth.RunExit{}), "exited 0", "0"},
		{"signal", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &berth.RunExit{Signal: "SIGTERM"}), "exited 143 (SIGTERM)", "143"},
		{"timeout", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, &berth.RunExit{ExitCode: -1, Kind: errdefs.Timeout}), "exited 124 (Timeout)", "124"},
		{"running", info(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil), "running", ""},
		{"canceled", info(enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, nil), "canceled", ""},
		{"ended before the memo", info(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, nil), "completed", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := runRowOf(tt.info)
			b, _ := json.Marshal(r)
			var got map[string]any
			_ = json.Unmarshal(b, &got)
			code, has := got["exit_code"]
			if r.State != tt.state || r.Command != "sh -c exit 7" || has != (tt.code != "") ||
				(has && strings.TrimSpace(string(mustJSON(t, code))) != tt.code) {
				t.Errorf("row %+v, JSON %s; want state %q, exit_code %q", r, b, tt.state, tt.code)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// berth sandbox ls names the sandbox a fork came from as session ls
// does: FORK OF, fork_of (and owner, its first name, for scripts).
func TestSandboxRowForkOf(t *testing.T) {
	if !strings.HasSuffix(sandboxHeader, "\tFORK OF") {
		t.Errorf("sandbox ls header %q; want FORK OF, as session ls", sandboxHeader)
	}
	r := sandboxRow{ID: "sbx-2", Provider: "linux", State: "running", ForkOf: "sbx-1", Owner: "sbx-1"}
	if line := sandboxLine(r); !strings.HasSuffix(line, "\tsbx-1") {
		t.Errorf("line %q", line)
	}
	if line := sandboxLine(sandboxRow{ID: "sbx-1"}); !strings.HasSuffix(line, "\t-") {
		t.Errorf("line of a standalone sandbox %q; want - for no fork", line)
	}
	var got map[string]any
	_ = json.Unmarshal(mustJSON(t, r), &got)
	if got["fork_of"] != "sbx-1" || got["owner"] != "sbx-1" {
		t.Errorf("JSON %v; want fork_of and owner", got)
	}
}

// run --help gives the defaults of --timeout, --cpu and --memory, and
// inspect names the default a 0 stands for, as create --help does.
func TestDefaultsShown(t *testing.T) {
	root := newRoot()
	run, _, err := root.Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	create, _, err := root.Find([]string{"sandbox", "create"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cmd, flag, want string }{
		{"run", "timeout", "default 10m"}, {"run", "memory", "default 2Gi"}, {"run", "cpu", "default unlimited"},
		{"create", "memory", "default 2Gi"}, {"create", "disk", "default 10Gi"},
	} {
		cmd := run
		if c.cmd == "create" {
			cmd = create
		}
		if f := cmd.Flags().Lookup(c.flag); f == nil || !strings.Contains(f.Usage, c.want) {
			t.Errorf("%s --%s: %v; want %q in its help", c.cmd, c.flag, f, c.want)
		}
	}
	var text strings.Builder
	if err := (inspection{Memory: 0, Disk: 1 << 30}).writeText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\nmemory_bytes: 0 (the provider's default: 2Gi)\n", "\ndisk_bytes: 1073741824\n",
		"\npids: 0 (the provider's default: 4096)\n", "\ncpu: 0 (the provider's default: unlimited)\n"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("inspect:\n%s\nwant %q", text.String(), want)
		}
	}
}
