package activities

import (
	"bytes"
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/berth-dev/berth/provider"
)

// ExecInput is a command to run in a sandbox.
type ExecInput struct {
	Sandbox Ref `json:"sandbox"`
	// ID is the command's id in the sandbox's journal. The workflow
	// chooses it, and it stays the same across retries: that is what
	// makes the command run once.
	ID      string            `json:"id"`
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"`
	Stdin   []byte            `json:"stdin,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
}

// ExecOutput is what became of a command. A command that timed out or
// ran out of memory is a result, not an activity failure: retrying would
// not change it.
type ExecOutput struct {
	ExitCode  int           `json:"exit_code"`
	Signal    string        `json:"signal,omitempty"`
	TimedOut  bool          `json:"timed_out,omitempty"`
	OOMKilled bool          `json:"oom_killed,omitempty"`
	Duration  time.Duration `json:"duration"`
	Stdout    Output        `json:"stdout"`
	Stderr    Output        `json:"stderr"`
	// Attached: the command had been started by an earlier attempt.
	Attached bool `json:"attached,omitempty"`
}

// execProgress is an Exec's heartbeat: the output parts stored so far.
type execProgress struct {
	Parts [2]int `json:"parts"`
}

// LiveEvery is how often a running command's output is stored for
// readers following it live.
const LiveEvery = 100 * time.Millisecond

// heartbeatEvery is how often a running command's activity heartbeats;
// the SDK sends at most one per heartbeat timeout's fraction anyway.
const heartbeatEvery = 2 * time.Second

// Exec runs a command, or attaches to it when an earlier attempt started
// it, streaming its output into the blob store and heartbeating the
// progress a retry resumes from.
func (a *Activities) Exec(ctx context.Context, in ExecInput) (ExecOutput, error) {
	if in.ID == "" {
		return ExecOutput{}, toTemporal(errors.New("exec without a command id cannot be made exactly-once"))
	}
	sb, err := a.sandbox(ctx, in.Sandbox)
	if err != nil {
		return ExecOutput{}, toTemporal(err)
	}
	var prog execProgress
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &prog)
	}
	streams := [2]*capture{
		newCapture(ctx, a, OutputKey(in.Sandbox.ID, in.ID, "stdout"), prog.Parts[0]),
		newCapture(ctx, a, OutputKey(in.Sandbox.ID, in.ID, "stderr"), prog.Parts[1]),
	}
	progress := func() execProgress {
		return execProgress{Parts: [2]int{streams[0].progress(), streams[1].progress()}}
	}

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		beat := time.NewTicker(heartbeatEvery)
		defer beat.Stop()
		live := time.NewTicker(LiveEvery)
		defer live.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-beat.C:
				activity.RecordHeartbeat(ctx, progress())
			case <-live.C:
				streams[0].flushLive()
				streams[1].flushLive()
			}
		}
	}()

	req := provider.ExecRequest{
		ID: in.ID, Argv: in.Argv, Shell: in.Shell, Env: in.Env, Dir: in.Dir, Timeout: in.Timeout,
		Stdout: streams[0], Stderr: streams[1],
		StdoutOffset: streams[0].committed(), StderrOffset: streams[1].committed(),
	}
	if len(in.Stdin) > 0 {
		req.Stdin = bytes.NewReader(in.Stdin)
	}
	res, err := sb.Exec(ctx, req)
	switch {
	case errors.Is(err, provider.ErrTimeout), errors.Is(err, provider.ErrOutOfMemory):
		// Results, not failures: see ExecOutput.
	case err != nil:
		return ExecOutput{}, toTemporal(err)
	}
	out := ExecOutput{ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
		OOMKilled: res.OOMKilled, Duration: res.Duration, Attached: res.Attached}
	if out.Stdout, err = streams[0].finish(res.Truncated); err != nil {
		return ExecOutput{}, toTemporal(err)
	}
	if out.Stderr, err = streams[1].finish(res.Truncated); err != nil {
		return ExecOutput{}, toTemporal(err)
	}
	return out, nil
}
