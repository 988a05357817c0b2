package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
)

// TestCheckpointPolicy: each time rule of a CheckpointPolicy takes a
// checkpoint when its time comes, and only when something changed; a
// sandbox killed afterwards comes back from it, losing what came after
// and saying so.
func TestCheckpointPolicy(t *testing.T) {
	type step struct {
		write string        // a file to write ("" for none)
		sleep time.Duration // workflow time to let pass after
	}
	cases := []struct {
		name   string
		opts   []Option
		steps  []step
		files  string   // the workspace after recovery
		lost   []string // what the LostError names
		checks int      // checkpoints taken before the kill
	}{
		{
			name: "Interval",
			opts: []Option{WithCheckpoint(CheckpointPolicy{Interval: time.Minute}), WithIdleTimeout(NoIdleTimeout)},
			// a at 0s, b at 30s: the checkpoint at 60s holds both; c,
			// at 70s, comes after it, and its own is not due yet.
			steps: []step{{"a", 30 * time.Second}, {"b", 40 * time.Second}, {"c", 10 * time.Second}},
			files: "a b ", lost: []string{"write c"}, checks: 1,
		},
		{
			name:  "Idle",
			opts:  []Option{WithCheckpoint(CheckpointPolicy{Idle: time.Minute}), WithIdleTimeout(NoIdleTimeout)},
			steps: []step{{"a", 30 * time.Second}, {"b", 2 * time.Minute}, {"", 5 * time.Minute}, {"c", 10 * time.Second}},
			files: "a b ", lost: []string{"write c"}, checks: 1,
		},
		{
			// The idle checkpoint would come after the pause: it is
			// taken as the sandbox pauses, and the paused sandbox,
			// killed, comes back whole.
			name:  "IdleAfterPause",
			opts:  []Option{WithCheckpoint(CheckpointPolicy{Idle: 10 * time.Minute}), WithIdleTimeout(time.Minute)},
			steps: []step{{"a", 0}, {"b", 3 * time.Minute}},
			files: "a b ", lost: nil, checks: 1,
		},
		{
			name:  "None",
			opts:  []Option{WithIdleTimeout(NoIdleTimeout)},
			steps: []step{{"a", 5 * time.Minute}},
			files: "", lost: []string{"write a"}, checks: 0,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, _, _ := berthtest.WorkflowEnv(t)
			type report struct {
				Checkpoints []string
				Lost        []string
				Files       string
			}
			wf := func(ctx workflow.Context) (report, error) {
				var r report
				sbx, err := New(ctx, Provider{Name: "linux"}, append(tc.opts, WithHibernateAfter(NoIdleTimeout))...)
				if err != nil {
					return r, err
				}
				defer sbx.Stop(ctx)
				for _, st := range tc.steps {
					if st.write != "" {
						if err := sbx.WriteFiles(ctx, provider.File{Path: st.write, Data: []byte(st.write)}); err != nil {
							return r, err
						}
					}
					if st.sleep > 0 {
						if err := workflow.Sleep(ctx, st.sleep); err != nil {
							return r, err
						}
					}
					if c := sbx.Status().Checkpoint; c != "" && !slices.Contains(r.Checkpoints, c) {
						r.Checkpoints = append(r.Checkpoints, c)
					}
				}
				lost, err := killAndExec(ctx, t, sbx)
				if err != nil {
					return r, err
				}
				if !errors.Is(lost, errdefs.ErrSandboxLost) || !lost.Recovered {
					return r, errors.New("want a recovered LostError, got " + errString(lost))
				}
				r.Lost = lost.Lost
				res, err := sbx.Exec(ctx, "ls | tr '\\n' ' '")
				if err != nil {
					return r, err
				}
				r.Files = res.Stdout
				return r, nil
			}
			env.RegisterWorkflow(wf)
			env.ExecuteWorkflow(wf)
			var r report
			must(t, env.GetWorkflowResult(&r))
			if len(r.Checkpoints) != tc.checks {
				t.Errorf("checkpoints taken: %q, want %d", r.Checkpoints, tc.checks)
			}
			if !slices.Equal(r.Lost, tc.lost) {
				t.Errorf("lost %q, want %q", r.Lost, tc.lost)
			}
			if r.Files != tc.files {
				t.Errorf("recovered workspace %q, want %q", r.Files, tc.files)
			}
		})
	}
}

// TestCheckpointPolicyBad: a negative or too short rule is bad input.
func TestCheckpointPolicyBad(t *testing.T) {
	for _, p := range []CheckpointPolicy{{Every: -1}, {Interval: -time.Second}, {Idle: time.Millisecond}, {Interval: 10 * time.Millisecond}} {
		cfg := newConfig(Provider{Name: "linux"}, []Option{WithCheckpoint(p)})
		if err := cfg.validate(); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("%+v: %v, want bad input", p, err)
		}
	}
}

// TestLostOperationsBounded: the operations since the checkpoint that a
// LostError names are bounded (the list is workflow state), the rest
// counted; CheckpointEvery counts them all.
func TestLostOperationsBounded(t *testing.T) {
	env, _, _ := berthtest.WorkflowEnv(t)
	const every = maxSince + 8
	type report struct {
		Before, At string // the checkpoint one write before Every, and at it
		Lost       []string
	}
	wf := func(ctx workflow.Context) (report, error) {
		var r report
		sbx, err := New(ctx, Provider{Name: "linux"}, WithCheckpointEvery(every), WithIdleTimeout(NoIdleTimeout), WithHibernateAfter(NoIdleTimeout))
		if err != nil {
			return r, err
		}
		defer sbx.Stop(ctx)
		for i := range every + maxSince + 3 {
			name := fmt.Sprintf("f%d", i)
			if err := sbx.WriteFiles(ctx, provider.File{Path: name, Data: []byte(name)}); err != nil {
				return r, err
			}
			switch i {
			case every - 2:
				r.Before = sbx.Status().Checkpoint
			case every - 1:
				r.At = sbx.Status().Checkpoint
			}
		}
		lost, err := killAndExec(ctx, t, sbx)
		if err != nil {
			return r, err
		}
		r.Lost = lost.Lost
		return r, nil
	}
	env.RegisterWorkflow(wf)
	env.ExecuteWorkflow(wf)
	var r report
	must(t, env.GetWorkflowResult(&r))
	if r.Before != "" || r.At == "" {
		t.Errorf("checkpoints one write before CheckpointEvery %d and at it: %q, %q; want none, then one", every, r.Before, r.At)
	}
	want := []string{}
	for i := every; i < every+maxSince; i++ {
		want = append(want, fmt.Sprintf("write f%d", i))
	}
	want = append(want, "3 more")
	if !slices.Equal(r.Lost, want) {
		t.Errorf("lost %q; want the first %d writes since the checkpoint, then the count of the others", r.Lost, maxSince)
	}
}

// killAndExec kills the sandbox from outside, then runs a command,
// which must find it lost: its LostError.
func killAndExec(ctx workflow.Context, t *testing.T, sbx *Sandbox) (*LostError, error) {
	id := sbx.ID()
	if err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx,
		workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute}),
		func() error { berthtest.KillSandbox(t, id); return nil }).Get(ctx, nil); err != nil {
		return nil, err
	}
	_, err := sbx.Exec(ctx, "true")
	var lost *LostError
	if !errors.As(err, &lost) {
		return nil, errors.New("want a LostError, got " + errString(err))
	}
	return lost, nil
}
