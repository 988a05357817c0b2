// Package workflows holds berth's ready-made workflows, layer 4 of
// berth, built only from package sandbox: the one-shot Run, the
// standalone Sandbox driven by Workflow Updates, a host's Reaper, and
// the Catalog that answers front ends' read-only questions. Each is
// named berth.<Name> (names.go) and started with a summary a person can
// read.
package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/sandbox/ops"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/transfer/relay"
)

// RunInput is a one-shot job: files in, one command, output out, and the
// sandbox gone afterwards, whatever happens.
type RunInput struct {
	Provider string `json:"provider"`
	// Image is the image of the sandbox's root filesystem, for providers
	// that have images; empty means the provider's default.
	Image   string            `json:"image,omitempty"`
	Files   []provider.File   `json:"files,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Argv    []string          `json:"argv"`
	Timeout time.Duration     `json:"timeout,omitempty"`
	// Stdin is the command's standard input (it enters history).
	Stdin []byte `json:"stdin,omitempty"`
	// MaxOutput caps what is stored of each output stream; zero means
	// transfer.DefaultMaxOutput.
	MaxOutput int64              `json:"max_output,omitempty"`
	Resources provider.Resources `json:"resources,omitzero"`
	// Network is what the command may reach beyond its loopback; the
	// zero policy is loopback only.
	Network provider.Network `json:"network,omitzero"`
}

// RunOutput is what became of the command (package ops' result of a
// command, the berth.exec Update's too).
type RunOutput = ops.RunOutput

// MemoCommand is the memo key under which a front end that starts a Run
// names its command, for listings (berth run ls): a Run's input is not
// in the visibility store.
const MemoCommand = "berth.command"

// MemoExit is the memo key under which a Run keeps, once its command
// has ended, how it ended (RunExit), for listings (berth run ls).
const MemoExit = "berth.exit"

// RunExit is how a Run's command ended, as its memo keeps it.
type RunExit struct {
	ExitCode int          `json:"exit_code"`
	Signal   string       `json:"signal,omitempty"`
	Kind     errdefs.Kind `json:"kind,omitempty"`
}

// memoExitVersion marks the runs that keep MemoExit.
const memoExitVersion = "berth.run.memo-exit"

// RunQuery is the query a Run workflow answers with its RunStatus.
const RunQuery = "berth.run"

// UpdateRunResult is the Update a Run workflow answers with its
// command's RunOutput as soon as the command has ended, before the
// sandbox is destroyed: what a caller waits on to return at once. The
// workflow's own result comes after the destruction, and is a failure
// when the sandbox could not be destroyed.
const UpdateRunResult = "berth.run.result"

// RunStatus says where a run's output is stored while it runs, for front
// ends that follow it live. It is empty until the sandbox exists.
type RunStatus struct {
	Sandbox string `json:"sandbox,omitempty"`
	Stdout  string `json:"stdout,omitempty"` // blob keys
	Stderr  string `json:"stderr,omitempty"`
}

// Validate checks a job before anything is created for it.
func (in RunInput) Validate() error {
	if len(in.Argv) == 0 {
		return fmt.Errorf("%w: no command", errdefs.ErrBadInput)
	}
	if in.Provider == "" {
		return fmt.Errorf("%w: no provider", errdefs.ErrBadInput)
	}
	if err := provider.ValidateExec(provider.ExecRequest{Argv: in.Argv, Env: in.Env, Timeout: in.Timeout}); err != nil {
		return err
	}
	if err := provider.ValidateResources(in.Resources); err != nil {
		return err
	}
	return ops.ValidateFiles(in.Files)
}

// Run runs a one-shot job. What the command did, and why it stopped, is
// its result; only a failure to run it at all fails the workflow, with
// an application error whose type is the errdefs.Kind of the failure
// (sandbox.Failure). A sandbox lost mid-run is not re-created: the
// command's effects are gone with it, and running it again is not the
// caller's to decide; the run fails with SandboxLost.
func Run(ctx workflow.Context, in RunInput) (_ RunOutput, err error) {
	defer func() { err = sandbox.Failure(err) }()
	if err := in.Validate(); err != nil {
		return RunOutput{}, err
	}
	var status RunStatus
	if err := workflow.SetQueryHandler(ctx, RunQuery, func() (RunStatus, error) { return status, nil }); err != nil {
		return RunOutput{}, err
	}
	// The relay serves the sandbox's outputs, which follow the run once
	// it has ended, and nothing else.
	var sbx *sandbox.Sandbox
	if err := relay.Serve(ctx, func() transfer.Served { return transfer.Served{Prefixes: sbx.Served()} }); err != nil {
		return RunOutput{}, err
	}
	var (
		result *RunOutput // the command's, once it ended
		failed bool       // the run ends without one: its result says why
	)
	err = workflow.SetUpdateHandler(ctx, UpdateRunResult, func(ctx workflow.Context) (RunOutput, error) {
		if err := workflow.Await(ctx, func() bool { return result != nil || failed }); err != nil {
			return RunOutput{}, err
		}
		if result == nil {
			return RunOutput{}, errors.New("the run failed: its result says why")
		}
		return *result, nil
	})
	if err != nil {
		return RunOutput{}, err
	}
	defer func() { failed = result == nil }()
	// A one-shot job is never idle long enough to pause.
	sbx, err = sandbox.New(ctx, sandbox.Provider{Name: in.Provider, Image: in.Image},
		sandbox.WithResources(in.Resources), sandbox.WithEnv(in.Env), sandbox.WithNetwork(in.Network), sandbox.WithRecovery(sandbox.Fail),
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
			return RunOutput{}, lostMidRun(err)
		}
	}
	opts := []sandbox.ExecOption{sandbox.OnStart(func(cmd string) {
		status = RunStatus{Sandbox: sbx.ID(),
			Stdout: transfer.OutputKey(sbx.ID(), cmd, "stdout"), Stderr: transfer.OutputKey(sbx.ID(), cmd, "stderr")}
	})}
	if in.Timeout > 0 {
		opts = append(opts, sandbox.WithExecTimeout(in.Timeout))
	}
	opts = append(opts, sandbox.WithMaxOutput(in.MaxOutput), sandbox.WithStdin(in.Stdin))
	res, err := sbx.ExecArgv(ctx, in.Argv, opts...)
	out, err := ops.Output(res, sbx.ID(), err)
	if err == nil {
		result = &out
		if workflow.GetVersion(ctx, memoExitVersion, workflow.DefaultVersion, 1) == 1 {
			exit := RunExit{ExitCode: out.ExitCode, Signal: out.Signal, Kind: out.Kind}
			if err := workflow.UpsertMemo(ctx, map[string]any{MemoExit: exit}); err != nil {
				return out, err
			}
		}
	}
	return out, lostMidRun(err)
}

// lostMidRun says plainly that a one-shot run's sandbox was lost.
func lostMidRun(err error) error {
	var lost *sandbox.LostError
	if !errors.As(err, &lost) {
		return err
	}
	msg := fmt.Sprintf("the sandbox %s was lost mid-run; a one-shot run is not re-created", lost.Sandbox)
	if lost.Err != nil {
		msg += ": " + lost.Err.Error()
	}
	return errdefs.Errorf(errdefs.SandboxLost, "%s", msg)
}
