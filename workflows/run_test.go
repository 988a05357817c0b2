package workflows

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

func TestRun(t *testing.T) {
	tests := []struct {
		name     string
		in       RunInput
		exit     int
		kind     errdefs.Kind
		stdout   string
		failWith string
	}{
		{
			name: "files in, output out",
			in: RunInput{Provider: "linux", Argv: []string{"/bin/sh", "-c", "cat in/msg; echo $GREETING; exit 7"},
				Files: []provider.File{{Path: "in/msg", Data: []byte("from a file\n")}}, Env: map[string]string{"GREETING": "hi"}},
			exit: 7, stdout: "from a file\nhi\n",
		},
		{name: "timeout", in: RunInput{Provider: "linux", Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond}, exit: -1, kind: errdefs.Timeout},
		{name: "command not found", in: RunInput{Provider: "linux", Argv: []string{"no-such-tool"}}, kind: errdefs.CommandNotFound},
		{name: "out of memory", in: RunInput{Provider: "linux", Resources: provider.Resources{Memory: 64 << 20},
			Argv: []string{"/usr/bin/python3", "-c", "b = bytearray(512 << 20)"}}, exit: -1, kind: errdefs.OutOfMemory},
		{name: "unknown provider", in: RunInput{Provider: "nimbus", Argv: []string{"true"}}, failWith: "nimbus"},
		{name: "no command", in: RunInput{Provider: "linux"}, failWith: "no command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, p, _ := berthtest.WorkflowEnv(t)
			env.RegisterWorkflow(Run)
			env.ExecuteWorkflow(Run, tt.in)
			if tt.failWith != "" {
				if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), tt.failWith) {
					t.Fatalf("workflow error %v, want one naming %q", err, tt.failWith)
				}
				return
			}
			var out RunOutput
			if err := env.GetWorkflowResult(&out); err != nil {
				t.Fatal(err)
			}
			if out.ExitCode != tt.exit || out.Kind != tt.kind || string(out.Stdout.Inline) != tt.stdout {
				t.Errorf("got exit %d kind %q stdout %q (%s); want exit %d kind %q stdout %q",
					out.ExitCode, out.Kind, out.Stdout.Inline, out.Message, tt.exit, tt.kind, tt.stdout)
			}
			if infos, _ := p.List(t.Context(), nil); len(infos) != 0 {
				t.Errorf("the run left %d sandboxes", len(infos))
			}
		})
	}
}
