package sandbox_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/sandbox"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, provider.Provider) {
	env, p, _ := berthtest.WorkflowEnv(t)
	return env, p
}

// remaining lists the sandboxes a workflow left behind.
func remaining(t *testing.T, p provider.Provider) []provider.Info {
	t.Helper()
	infos, err := p.List(t.Context(), map[string]string{sandbox.LabelWorkflowID: "default-test-workflow-id"})
	if err != nil {
		t.Fatal(err)
	}
	return infos
}

func TestExecAndFiles(t *testing.T) {
	env, p := newEnv(t)
	type report struct {
		Stdout, Stderr string
		ExitCode       int
		File           string
		Names          []string
	}
	wf := func(ctx workflow.Context) (report, error) {
		sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
		if err != nil {
			return report{}, err
		}
		defer sbx.Stop(ctx)
		if err := sbx.WriteFiles(ctx, provider.File{Path: "src/main.py", Data: []byte("print('hi from python')\n")}); err != nil {
			return report{}, err
		}
		res, err := sbx.Exec(ctx, "/usr/bin/python3 src/main.py && echo to-err >&2 && echo made > out.txt && exit 3")
		if err != nil {
			return report{}, err
		}
		file, err := sbx.ReadFile(ctx, "out.txt")
		if err != nil {
			return report{}, err
		}
		infos, err := sbx.ListFiles(ctx, ".")
		if err != nil {
			return report{}, err
		}
		r := report{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode, File: string(file)}
		for _, fi := range infos {
			r.Names = append(r.Names, fi.Name)
		}
		return r, nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var got report
	if err := env.GetWorkflowResult(&got); err != nil {
		t.Fatal(err)
	}
	want := report{Stdout: "hi from python\n", Stderr: "to-err\n", ExitCode: 3, File: "made\n", Names: []string{"out.txt", "src"}}
	if strings.Join(got.Names, ",") != strings.Join(want.Names, ",") || got.Stdout != want.Stdout ||
		got.Stderr != want.Stderr || got.ExitCode != want.ExitCode || got.File != want.File {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if left := remaining(t, p); len(left) != 0 {
		t.Errorf("the workflow left sandboxes behind: %+v", left)
	}
}

func TestTypedErrors(t *testing.T) {
	env, _ := newEnv(t)
	wf := func(ctx workflow.Context) (string, error) {
		sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
		if err != nil {
			return "", err
		}
		defer sbx.Stop(ctx)
		var found []string
		if _, err := sbx.Exec(ctx, "sleep 30", sandbox.WithExecTimeout(200*time.Millisecond)); errors.Is(err, errdefs.ErrTimeout) {
			found = append(found, "timeout")
		}
		if _, err := sbx.ReadFile(ctx, "../../etc/passwd"); errors.Is(err, errdefs.ErrBadInput) {
			found = append(found, "bad-input")
		}
		if _, err := sbx.ReadFile(ctx, "missing"); errors.Is(err, os.ErrNotExist) {
			found = append(found, "not-exist")
		}
		return strings.Join(found, ","), nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var got string
	if err := env.GetWorkflowResult(&got); err != nil {
		t.Fatal(err)
	}
	if got != "timeout,bad-input,not-exist" {
		t.Errorf("typed errors seen in the workflow: %q", got)
	}
}

func TestUnknownProvider(t *testing.T) {
	env, _ := newEnv(t)
	wf := func(ctx workflow.Context) error {
		_, err := sandbox.New(ctx, sandbox.Provider{Name: "nimbus"})
		if errors.Is(err, errdefs.ErrBadInput) {
			return nil
		}
		return errors.New("want bad input, got " + errString(err))
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
}

// TestCancelStops cancels a workflow in the middle of a long command: the
// deferred Stop still destroys the sandbox.
func TestCancelStops(t *testing.T) {
	env, p := newEnv(t)
	wf := func(ctx workflow.Context) error {
		sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
		if err != nil {
			return err
		}
		defer sbx.Stop(ctx)
		_, err = sbx.Exec(ctx, "sleep 60")
		return err
	}
	env.RegisterWorkflow(wf)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	start := time.Now()
	env.ExecuteWorkflow(wf)
	if err := env.GetWorkflowError(); err == nil {
		t.Error("a cancelled workflow succeeded")
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("cancellation took %v", d)
	}
	if left := remaining(t, p); len(left) != 0 {
		t.Errorf("a cancelled workflow left sandboxes behind: %+v", left)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestOutputBudget: what a sandbox's commands store counts against its
// budget; once it is spent, each command keeps only its first and last
// bytes.
func TestOutputBudget(t *testing.T) {
	env, _ := newEnv(t)
	type report struct{ Dropped [2]int64 }
	wf := func(ctx workflow.Context) (report, error) {
		sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"}, sandbox.WithOutputBudget(12<<20))
		if err != nil {
			return report{}, err
		}
		defer sbx.Stop(ctx)
		var r report
		for i := range 2 {
			// About 8 MiB each.
			res, err := sbx.Exec(ctx, "seq 1 1200000")
			if err != nil {
				return report{}, err
			}
			r.Dropped[i] = res.Output[0].Dropped
		}
		return r, nil
	}
	env.ExecuteWorkflow(wf)
	var r report
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(err)
	}
	if r.Dropped[0] != 0 {
		t.Errorf("the first command, within the budget, dropped %d bytes", r.Dropped[0])
	}
	// 12 MiB less the first's ~8 MiB leaves ~4 MiB.
	if r.Dropped[1] < 3<<20 {
		t.Errorf("the second command, past the budget, dropped only %d bytes", r.Dropped[1])
	}
}
