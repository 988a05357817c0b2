// Package workflows holds berth's ready-made workflows, layer 4 of
// berth, built only from package sandbox: the one-shot Run, the
// standalone Sandbox driven by Workflow Updates, and the Reaper.
package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
)

// RunInput is a one-shot job: files in, one command, output out, and the
// sandbox gone afterwards, whatever happens.
type RunInput struct {
	Provider  string             `json:"provider"`
	Files     []provider.File    `json:"files,omitempty"`
	Env       map[string]string  `json:"env,omitempty"`
	Argv      []string           `json:"argv"`
	Timeout   time.Duration      `json:"timeout,omitempty"`
	Resources provider.Resources `json:"resources,omitzero"`
}

// RunOutput is what became of the command. Kind names why the command
// did not run to its own end, when it did not (a provider.Kind: Timeout,
// OutOfMemory, CommandNotFound...).
type RunOutput struct {
	ExitCode int               `json:"exit_code"`
	Signal   string            `json:"signal,omitempty"`
	Kind     provider.Kind     `json:"kind,omitempty"`
	Message  string            `json:"message,omitempty"`
	Stdout   activities.Output `json:"stdout"`
	Stderr   activities.Output `json:"stderr"`
	Duration time.Duration     `json:"duration"`
	Sandbox  string            `json:"sandbox"`
}

// RunQuery is the query a Run workflow answers with its RunStatus.
const RunQuery = "berth.run"

// RunStatus says where a run's output is stored while it runs, for front
// ends that follow it live (activities.Follower). It is empty until the
// sandbox exists.
type RunStatus struct {
	Sandbox string `json:"sandbox,omitempty"`
	Stdout  string `json:"stdout,omitempty"` // blob keys
	Stderr  string `json:"stderr,omitempty"`
}

// Run runs a one-shot job. What the command did, and why it stopped, is
// its result; only a failure to run it at all fails the workflow.
func Run(ctx workflow.Context, in RunInput) (_ RunOutput, err error) {
	if len(in.Argv) == 0 {
		return RunOutput{}, fmt.Errorf("%w: no command", provider.ErrBadInput)
	}
	var status RunStatus
	if err := workflow.SetQueryHandler(ctx, RunQuery, func() (RunStatus, error) { return status, nil }); err != nil {
		return RunOutput{}, err
	}
	// A one-shot job is never idle long enough to pause.
	sbx, err := sandbox.New(ctx, sandbox.Provider{Type: in.Provider},
		sandbox.WithResources(in.Resources), sandbox.WithEnv(in.Env),
		sandbox.WithIdleTimeout(sandbox.NoIdleTimeout), sandbox.WithHibernateAfter(sandbox.NoIdleTimeout))
	if err != nil {
		return RunOutput{}, err
	}
	defer func() {
		// A sandbox that could not be destroyed fails the run: nobody
		// must think it gone.
		if serr := sbx.Stop(ctx); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if len(in.Files) > 0 {
		if err := sbx.WriteFiles(ctx, in.Files...); err != nil {
			return RunOutput{}, err
		}
	}
	opts := []sandbox.ExecOption{sandbox.OnStart(func(cmd string) {
		status = RunStatus{Sandbox: sbx.ID(),
			Stdout: activities.OutputKey(sbx.ID(), cmd, "stdout"), Stderr: activities.OutputKey(sbx.ID(), cmd, "stderr")}
	})}
	if in.Timeout > 0 {
		opts = append(opts, sandbox.WithTimeout(in.Timeout))
	}
	res, err := sbx.ExecArgv(ctx, in.Argv, opts...)
	out := RunOutput{ExitCode: res.ExitCode, Signal: res.Signal, Stdout: res.Output[0],
		Stderr: res.Output[1], Duration: res.Duration, Sandbox: sbx.ID()}
	if err != nil {
		kind := provider.KindOf(err)
		if kind == provider.KindInternal || kind == provider.KindLost {
			return RunOutput{}, err
		}
		out.Kind, out.Message = kind, err.Error()
	}
	return out, nil
}
