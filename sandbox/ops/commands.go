package ops

import (
	"fmt"
	"slices"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
)

// Commands are named by the ids of the berth.exec Updates that run them.
// These Updates follow one that is running, or one among the last that
// ended, and signal a running one.
const (
	UpdateSignal = "berth.signal" // SignalRequest -> nothing
	UpdateAttach = "berth.attach" // AttachRequest -> RunOutput, as berth.exec's
)

// Bounds of what a sandbox remembers of its ended commands, for
// berth.attach: the last MaxEndedCommands, with at most MaxEndedInline
// bytes of output inline in all. Past the byte bound, the oldest lose
// their inline output where it is stored whole (a follower then reads
// it from the store), and are forgotten where it is not.
const (
	MaxEndedCommands = 64
	MaxEndedInline   = 1 << 20
)

// maxEndedMessage bounds the error message kept of a command.
const maxEndedMessage = 1 << 10

// SignalRequest signals a running command.
type SignalRequest struct {
	Command string `json:"command"` // the id of the berth.exec Update that runs it
	Signal  string `json:"signal"`  // a name of provider.Signals: INT, TERM, KILL...
}

// AttachRequest asks for a command's result: at once for one that ended,
// when it ends for one that runs.
type AttachRequest struct {
	Command string `json:"command"`
}

// EndedCommand is how a command ended, as its workflow remembers it
// (and carries across continue-as-new: Owner.Ended, Ops.Ended).
type EndedCommand struct {
	Command string    `json:"command"`
	Output  RunOutput `json:"output"`
	// Kind and Message: the berth.exec Update failed (bad input, a
	// sandbox lost) with this error rather than returning Output.
	Kind    errdefs.Kind `json:"kind,omitempty"`
	Message string       `json:"message,omitempty"`
}

// Ended are the last commands that ended, for the workflow's next run
// (Owner.Ended).
func (o *Ops) Ended() []EndedCommand { return o.ended }

// begin counts the command of Update update as running, before it is
// sent to the sandbox.
func (o *Ops) begin(update string) { o.running[update] = CommandStatus{Update: update} }

// started records where a running command's output is stored.
func (o *Ops) started(update, sandboxID, commandID string) {
	o.running[update] = CommandStatus{Update: update, Command: commandID,
		Stdout: transfer.OutputKey(sandboxID, commandID, "stdout"),
		Stderr: transfer.OutputKey(sandboxID, commandID, "stderr")}
}

// end moves a command from running to ended, with its Update's result.
func (o *Ops) end(update string, out RunOutput, err error) {
	delete(o.running, update)
	e := EndedCommand{Command: update, Output: out}
	if err != nil {
		e.Kind, e.Message = errdefs.KindOf(err), err.Error()
		if e.Kind == errdefs.Internal {
			e.Kind = temporalerr.KindOf(err) // as updateError typed it
		}
		if len(e.Message) > maxEndedMessage {
			e.Message = e.Message[:maxEndedMessage] + "..."
		}
	}
	o.ended = append(o.ended, e)
	o.bound()
}

// bound keeps the ended commands within MaxEndedCommands and
// MaxEndedInline.
func (o *Ops) bound() {
	if n := len(o.ended) - MaxEndedCommands; n > 0 {
		o.ended = slices.Delete(o.ended, 0, n)
	}
	held := 0
	for _, e := range o.ended {
		held += len(e.Output.Stdout.Inline) + len(e.Output.Stderr.Inline)
	}
	for i := 0; held > MaxEndedInline && i < len(o.ended); i++ {
		for _, o := range []*transfer.Output{&o.ended[i].Output.Stdout, &o.ended[i].Output.Stderr} {
			if o.Blob != "" && len(o.Inline) > 0 {
				held -= len(o.Inline)
				o.Inline, o.HeadLen, o.Truncated = nil, 0, true
			}
		}
	}
	for held > MaxEndedInline {
		held -= len(o.ended[0].Output.Stdout.Inline) + len(o.ended[0].Output.Stderr.Inline)
		o.ended = o.ended[1:]
	}
	o.ended = slices.Clip(o.ended)
}

func (o *Ops) findEnded(id string) (EndedCommand, bool) {
	for i := len(o.ended) - 1; i >= 0; i-- {
		if o.ended[i].Command == id {
			return o.ended[i], true
		}
	}
	return EndedCommand{}, false
}

// unknown is the error for a command id the sandbox does not know.
func unknown(id string) error {
	return fmt.Errorf("%w: no command %q in this sandbox (it remembers its running commands and the last %d that ended)",
		errdefs.ErrBadInput, id, MaxEndedCommands)
}

func (o *Ops) validateSignal(ctx workflow.Context, req SignalRequest) error {
	if err := o.owner.Open(); err != nil {
		return err
	}
	if _, err := provider.ParseSignal(req.Signal); err != nil {
		return sandbox.Failure(err)
	}
	if err := provider.ValidateID(req.Command); err != nil {
		return sandbox.Failure(fmt.Errorf("command: %w", err))
	}
	if _, ok := o.running[req.Command]; !ok {
		if e, ok := o.findEnded(req.Command); ok {
			return sandbox.Failure(fmt.Errorf("%w: command %s has ended (%s)", errdefs.ErrBadInput, req.Command, e.describe()))
		}
		return sandbox.Failure(unknown(req.Command))
	}
	return nil
}

func (o *Ops) signal(ctx workflow.Context, req SignalRequest) error {
	sbx, err := o.sandbox(ctx)
	if err != nil {
		return err
	}
	// A command not yet sent to the sandbox (one waiting for it to be
	// created or resumed) is signalled once it is.
	var st CommandStatus
	err = workflow.Await(ctx, func() bool {
		var ok bool
		st, ok = o.running[req.Command]
		return !ok || st.Command != ""
	})
	if err != nil || st.Command == "" {
		return err // it ended before it started: nothing to signal
	}
	return sandbox.Failure(sbx.Signal(ctx, st.Command, req.Signal))
}

func (o *Ops) validateAttach(_ workflow.Context, req AttachRequest) error {
	if err := provider.ValidateID(req.Command); err != nil {
		return sandbox.Failure(fmt.Errorf("command: %w", err))
	}
	if _, ok := o.running[req.Command]; ok {
		return nil
	}
	if _, ok := o.findEnded(req.Command); ok {
		return nil
	}
	return sandbox.Failure(unknown(req.Command))
}

func (o *Ops) attach(ctx workflow.Context, req AttachRequest) (RunOutput, error) {
	err := workflow.Await(ctx, func() bool { _, ok := o.running[req.Command]; return !ok })
	if err != nil {
		return RunOutput{}, err
	}
	e, ok := o.findEnded(req.Command)
	if !ok {
		return RunOutput{}, sandbox.Failure(unknown(req.Command))
	}
	if e.Kind != "" {
		return RunOutput{}, sandbox.Failure(errdefs.Errorf(e.Kind, "%s", e.Message))
	}
	return e.Output, nil
}

// describe says how a command ended, for messages.
func (e EndedCommand) describe() string {
	switch {
	case e.Kind != "":
		return string(e.Kind)
	case e.Output.Kind != "":
		return string(e.Output.Kind)
	case e.Output.Signal != "":
		return "killed by " + e.Output.Signal
	}
	return fmt.Sprintf("exit code %d", e.Output.ExitCode)
}
