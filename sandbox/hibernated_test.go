package sandbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// A sandbox started hibernated from a template's snapshot makes nothing
// at the provider until its first command, which runs in the
// template's workspace; its status says what it is meanwhile.
func TestStartHibernatedFromSnapshot(t *testing.T) {
	env, p := newEnv(t)
	type report struct {
		Before      sandbox.Status
		MadeBefore  int
		Stdout      string
		After       sandbox.Status
		MadeAfter   int
		Snapshot    string
		Generations int
	}
	wf := func(ctx workflow.Context) (report, error) {
		var r report
		tmpl, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
		if err != nil {
			return r, err
		}
		if err := tmpl.WriteFiles(ctx, provider.File{Path: "tmpl/notes.txt", Data: []byte("from the template\n")}); err != nil {
			return r, err
		}
		if r.Snapshot, err = tmpl.Snapshot(ctx); err != nil {
			return r, err
		}
		if err := tmpl.Stop(ctx); err != nil {
			return r, err
		}
		sbx, err := sandbox.StartHibernated(ctx, sandbox.Provider{Name: "linux"}, sandbox.FromSnapshot(r.Snapshot))
		if err != nil {
			return r, err
		}
		defer sbx.Stop(ctx)
		r.Before, r.MadeBefore = sbx.Status(), len(remaining(t, p))
		res, err := sbx.Exec(ctx, "cat tmpl/notes.txt")
		if err != nil {
			return r, err
		}
		r.Stdout, r.After, r.MadeAfter = res.Stdout, sbx.Status(), len(remaining(t, p))
		return r, nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var r report
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(temporalerr.OneLine(err))
	}
	if b := r.Before; b.State != sandbox.StateHibernated || !b.NotYetMade || b.ID != "" || b.WillBe == "" ||
		b.Checkpoint != r.Snapshot || b.Provider != "linux" {
		t.Errorf("before its first command: %+v", b)
	}
	if r.MadeBefore != 0 {
		t.Errorf("%d sandboxes at the provider before the first command", r.MadeBefore)
	}
	if r.Stdout != "from the template\n" {
		t.Errorf("the first command read %q", r.Stdout)
	}
	if a := r.After; a.State != sandbox.StateRunning || a.NotYetMade || a.ID != r.Before.WillBe || a.Generation != 1 {
		t.Errorf("after its first command: %+v (want id %s)", a, r.Before.WillBe)
	}
	if r.MadeAfter != 1 {
		t.Errorf("%d sandboxes at the provider after the first command", r.MadeAfter)
	}
	if left := remaining(t, p); len(left) != 0 {
		t.Errorf("left behind: %+v", left)
	}
}

// A hibernated start from a snapshot that is not there, or is no
// snapshot's name, fails at once, as one typed line that is not retried.
func TestStartHibernatedBadSnapshot(t *testing.T) {
	cases := []struct {
		name, snapshot string
		kind           errdefs.Kind
		says           string
	}{
		{"Unknown", "no-such-template", errdefs.NotFound, `no snapshot "no-such-template"`},
		{"BadName", "../up", errdefs.BadInput, "snapshot"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, p := newEnv(t)
			wf := func(ctx workflow.Context) error {
				_, err := sandbox.StartHibernated(ctx, sandbox.Provider{Name: "linux"}, sandbox.FromSnapshot(tc.snapshot))
				return sandbox.Failure(err)
			}
			env.RegisterWorkflow(wf)
			env.ExecuteWorkflow(wf)
			err := env.GetWorkflowError()
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != string(tc.kind) || !app.NonRetryable() {
				t.Fatalf("got %v, want a non-retryable %s", err, tc.kind)
			}
			if line := temporalerr.OneLine(err); strings.Contains(line, "\n") || !strings.Contains(line, tc.says) {
				t.Errorf("the error %q: want one line saying %q", line, tc.says)
			}
			if left := remaining(t, p); len(left) != 0 {
				t.Errorf("made: %+v", left)
			}
		})
	}
}
