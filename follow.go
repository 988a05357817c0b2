package berth

import (
	"context"
	"io"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/workflows"
)

// LiveEvery is how often a follower asks for new output: the worker
// stores it about as often.
const LiveEvery = 100 * time.Millisecond

// follower prints a running command's two streams as they are stored,
// then the rest from its result.
type follower struct {
	c        *Client
	workflow string // whose workers relay the streams
	keys     func(ctx context.Context) (stdout, stderr string, ok bool)
	w        [2]io.Writer
	key      [2]string
	off      [2]int64
	every    time.Duration // zero means LiveEvery
}

// poll prints what is new. Errors only mean the rest comes later.
func (f *follower) poll(ctx context.Context) {
	if f.key[0] == "" {
		stdout, stderr, ok := f.keys(ctx)
		if !ok {
			return // not started yet
		}
		f.key = [2]string{stdout, stderr}
	}
	for i := range f.key {
		for {
			b, err := f.c.readChunkOnce(ctx, f.workflow, f.key[i], f.off[i], transfer.MaxChunk)
			if err != nil || len(b) == 0 {
				break
			}
			if _, err := f.w[i].Write(b); err != nil {
				return
			}
			f.off[i] += int64(len(b))
			if len(b) < transfer.MaxChunk {
				break
			}
		}
	}
}

// finish prints the rest of each stream from its result.
func (f *follower) finish(ctx context.Context, out workflows.RunOutput) error {
	var first error
	for i, o := range []transfer.Output{out.Stdout, out.Stderr} {
		if err := f.c.WriteOutput(ctx, f.workflow, o, f.off[i], f.w[i]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// follow polls until result returns, then prints the rest.
func (f *follower) follow(ctx context.Context, result func(context.Context) (workflows.RunOutput, error)) (workflows.RunOutput, error) {
	type res struct {
		out workflows.RunOutput
		err error
	}
	done := make(chan res, 1)
	// A poll under way when the result comes (or its wait gives up on a
	// server gone) is cut short: finish reads the rest from where the
	// polls got.
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		out, err := result(ctx)
		pcancel()
		done <- res{out, err}
	}()
	every := f.every
	if every == 0 {
		every = LiveEvery
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return r.out, r.err
			}
			return r.out, f.finish(ctx, r.out)
		case <-tick.C:
			f.poll(pctx)
		}
	}
}

// readChunkOnce is readChunk without waiting for an unavailable server:
// live output can wait for the next tick.
func (c *Client) readChunkOnce(ctx context.Context, workflowID, key string, off int64, max int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.temporal.QueryWorkflow(ctx, workflowID, "", transfer.QueryRead,
		transfer.ReadRequest{Key: key, Offset: off, Max: max})
	if err != nil {
		return nil, err
	}
	var b []byte
	err = v.Get(&b)
	return b, err
}

// Command is a command in a standalone sandbox, named by the id of the
// Update that runs it.
type Command struct {
	c *Client
	// Sandbox is the id of the sandbox it runs in; ID its own, which
	// Attach takes.
	Sandbox string
	ID      string
	// h waits for the command's result: its berth.exec Update, or a
	// berth.attach.
	h    client.WorkflowUpdateHandle
	name string
	// stdout and stderr are where Wait writes its output; nil keeps it.
	stdout, stderr io.Writer
}

// startExec starts a command in the standalone sandbox sandboxID and
// returns once the sandbox has accepted it. The command goes on whether
// or not anyone follows it.
func (c *Client) startExec(ctx context.Context, sandboxID string, req workflows.ExecRequest) (*Command, error) {
	id := NewID("exec-")
	h, err := c.startUpdate(ctx, sandboxID, id, workflows.UpdateExec, req)
	if err != nil {
		return nil, err
	}
	return &Command{c: c, Sandbox: sandboxID, ID: id, h: h, name: workflows.UpdateExec}, nil
}

// Attach returns the command commandID of the standalone sandbox
// sandboxID, running or among the last that ended, to follow.
func (c *Client) attach(ctx context.Context, sandboxID, commandID string) (*Command, error) {
	h, err := c.startUpdate(ctx, sandboxID, NewID("attach-"), workflows.UpdateAttach,
		workflows.AttachRequest{Command: commandID})
	if err != nil {
		return nil, err
	}
	return &Command{c: c, Sandbox: sandboxID, ID: commandID, h: h, name: workflows.UpdateAttach}, nil
}

// Signal sends sig (INT, TERM, KILL...: provider.Signals) to a running
// command.
func (cmd *Command) Signal(ctx context.Context, sig string) error {
	return cmd.c.signalCommand(ctx, cmd.Sandbox, cmd.ID, sig)
}

// signalCommand sends sig to the running command commandID of the
// standalone sandbox sandboxID.
func (c *Client) signalCommand(ctx context.Context, sandboxID, commandID, sig string) error {
	return c.update(ctx, sandboxID, "", workflows.UpdateSignal, nil,
		workflows.SignalRequest{Command: commandID, Signal: sig})
}

// Follow writes the command's output to stdout and stderr, from its
// start, as it is produced, and returns what became of it: a Result,
// zero when nothing is known, even with an error. Its output is whole,
// or the error wraps ErrIncomplete.
func (cmd *Command) Follow(ctx context.Context, stdout, stderr io.Writer) (*Result, error) {
	f := &follower{c: cmd.c, workflow: cmd.Sandbox, w: [2]io.Writer{stdout, stderr}, keys: cmd.c.commandKeys(cmd.Sandbox, cmd.ID)}
	out, err := f.follow(ctx, cmd.c.updateResult(cmd.Sandbox, cmd.ID, cmd.h, cmd.name))
	return resultOf(out), err
}

// commandKeys finds where the output of the command that Update
// updateID runs is stored, once it has started.
func (c *Client) commandKeys(sandboxID, updateID string) func(ctx context.Context) (stdout, stderr string, ok bool) {
	return func(ctx context.Context) (string, string, bool) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var st workflows.SandboxStatus
		v, err := c.temporal.QueryWorkflow(ctx, sandboxID, "", workflows.QuerySandbox)
		if err != nil || v.Get(&st) != nil {
			return "", "", false
		}
		for _, r := range st.Running {
			if r.Update == updateID {
				return r.Stdout, r.Stderr, true
			}
		}
		return "", "", false
	}
}

// execResult waits for the result of the exec Update updateID.
func (c *Client) execResult(sandboxID, updateID string, h client.WorkflowUpdateHandle) func(ctx context.Context) (workflows.RunOutput, error) {
	return c.updateResult(sandboxID, updateID, h, workflows.UpdateExec)
}

// updateResult waits for the result of the command commandID: the
// Update h, named name (berth.exec, or berth.attach).
func (c *Client) updateResult(sandboxID, commandID string, h client.WorkflowUpdateHandle, name string) func(ctx context.Context) (workflows.RunOutput, error) {
	return func(ctx context.Context) (workflows.RunOutput, error) {
		var out workflows.RunOutput
		err := c.waitUpdate(ctx, h, name, &out)
		if u, ok := err.(*UnavailableError); ok {
			u.MayHaveRun = true
			u.ResultHint = "berth sandbox attach " + sandboxID + " " + commandID
		}
		return out, err
	}
}

// followRun follows the one-shot run runID (a Run workflow), writing its
// command's output as it is produced, and returns the run's result.
func (c *Client) followRun(ctx context.Context, runID string, stdout, stderr io.Writer) (workflows.RunOutput, error) {
	f := &follower{c: c, workflow: runID, w: [2]io.Writer{stdout, stderr}}
	f.keys = func(ctx context.Context) (string, string, bool) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var st workflows.RunStatus
		v, err := c.temporal.QueryWorkflow(ctx, runID, "", workflows.RunQuery)
		if err != nil || v.Get(&st) != nil || st.Stdout == "" {
			return "", "", false
		}
		return st.Stdout, st.Stderr, true
	}
	return f.follow(ctx, func(ctx context.Context) (workflows.RunOutput, error) {
		out, err := c.commandResult(ctx, runID)
		if err == nil || temporalerr.ServerUnavailable(err) {
			return out, c.unavailable(err, "run "+runID, true, "berth logs "+runID)
		}
		err = c.retry(ctx, func(ctx context.Context) error {
			return c.temporal.GetWorkflow(ctx, runID, "").Get(ctx, &out)
		})
		return out, c.unavailable(err, "run "+runID, true, "berth logs "+runID)
	})
}

// commandResult asks a run for its command's result, which it gives as
// soon as the command ended, without waiting for its sandbox to be
// destroyed, riding out server restarts. Any failure but an unavailable
// server (the run failed, ended already, or predates the Update) is left
// to the run's own result.
func (c *Client) commandResult(ctx context.Context, runID string) (workflows.RunOutput, error) {
	var out workflows.RunOutput
	err := c.retry(ctx, func(ctx context.Context) error {
		h, err := c.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: runID, UpdateName: workflows.UpdateRunResult,
			WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err != nil {
			return err
		}
		return h.Get(ctx, &out)
	})
	return out, err
}
