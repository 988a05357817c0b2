package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
)

// A standalone sandbox's commands are named by the ids of the berth.exec
// Updates that run them. These Updates follow one that is running, or
// one among the last that ended, and signal a running one.
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

// EndedCommand is how a command ended, as its sandbox remembers it.
type EndedCommand struct {
	Command string    `json:"command"`
	Output  RunOutput `json:"output"`
	// Kind and Message: the berth.exec Update failed (bad input, a
	// sandbox lost) with this error rather than returning Output.
	Kind    provider.Kind `json:"kind,omitempty"`
	Message string        `json:"message,omitempty"`
}

// commands is what a standalone sandbox knows of its commands: those
// running, by Update id, and the last that ended, oldest first.
type commands struct {
	running map[string]CommandStatus // Command empty until it is sent to the sandbox
	ended   []EndedCommand
	// sbx waits for the sandbox; open refuses an operation on one that
	// is stopping.
	sbx  func(workflow.Context) (*sandbox.Sandbox, error)
	open func(workflow.Context) error
}

func newCommands(ended []EndedCommand, sbx func(workflow.Context) (*sandbox.Sandbox, error), open func(workflow.Context) error) *commands {
	return &commands{running: map[string]CommandStatus{}, ended: ended, sbx: sbx, open: open}
}

func (c *commands) register(ctx workflow.Context) error {
	for _, h := range []struct {
		name               string
		handler, validator any
	}{
		{UpdateSignal, c.signal, c.validateSignal},
		{UpdateAttach, c.attach, c.validateAttach},
	} {
		err := workflow.SetUpdateHandlerWithOptions(ctx, h.name, h.handler,
			workflow.UpdateHandlerOptions{Validator: h.validator})
		if err != nil {
			return err
		}
	}
	return nil
}

// begin counts the command of Update update as running, before it is
// sent to the sandbox.
func (c *commands) begin(update string) { c.running[update] = CommandStatus{Update: update} }

// started records where a running command's output is stored.
func (c *commands) started(update, sandboxID, commandID string) {
	c.running[update] = CommandStatus{Update: update, Command: commandID,
		Stdout: transfer.OutputKey(sandboxID, commandID, "stdout"),
		Stderr: transfer.OutputKey(sandboxID, commandID, "stderr")}
}

// end moves a command from running to ended, with its Update's result.
func (c *commands) end(update string, out RunOutput, err error) {
	delete(c.running, update)
	e := EndedCommand{Command: update, Output: out}
	if err != nil {
		e.Kind, e.Message = provider.KindOf(err), err.Error()
		var appErr *temporal.ApplicationError
		if e.Kind == provider.KindInternal && errors.As(err, &appErr) && provider.Kind(appErr.Type()).Known() {
			e.Kind = provider.Kind(appErr.Type()) // as updateError typed it
		}
		if len(e.Message) > maxEndedMessage {
			e.Message = e.Message[:maxEndedMessage] + "..."
		}
	}
	c.ended = append(c.ended, e)
	c.bound()
}

// bound keeps the ended commands within MaxEndedCommands and
// MaxEndedInline.
func (c *commands) bound() {
	if n := len(c.ended) - MaxEndedCommands; n > 0 {
		c.ended = slices.Delete(c.ended, 0, n)
	}
	held := 0
	for _, e := range c.ended {
		held += len(e.Output.Stdout.Inline) + len(e.Output.Stderr.Inline)
	}
	for i := 0; held > MaxEndedInline && i < len(c.ended); i++ {
		for _, o := range []*transfer.Output{&c.ended[i].Output.Stdout, &c.ended[i].Output.Stderr} {
			if o.Blob != "" && len(o.Inline) > 0 {
				held -= len(o.Inline)
				o.Inline, o.HeadLen, o.Truncated = nil, 0, true
			}
		}
	}
	for held > MaxEndedInline {
		held -= len(c.ended[0].Output.Stdout.Inline) + len(c.ended[0].Output.Stderr.Inline)
		c.ended = c.ended[1:]
	}
	c.ended = slices.Clip(c.ended)
}

// list is the running commands that were sent to the sandbox, by id.
func (c *commands) list() []CommandStatus {
	var l []CommandStatus
	for _, s := range c.running {
		if s.Command != "" {
			l = append(l, s)
		}
	}
	slices.SortFunc(l, func(a, b CommandStatus) int { return strings.Compare(a.Update, b.Update) })
	return l
}

func (c *commands) findEnded(id string) (EndedCommand, bool) {
	for i := len(c.ended) - 1; i >= 0; i-- {
		if c.ended[i].Command == id {
			return c.ended[i], true
		}
	}
	return EndedCommand{}, false
}

// unknown is the error for a command id the sandbox does not know.
func unknown(id string) error {
	return fmt.Errorf("%w: no command %q in this sandbox (it remembers its running commands and the last %d that ended)",
		provider.ErrBadInput, id, MaxEndedCommands)
}

func (c *commands) validateSignal(ctx workflow.Context, req SignalRequest) error {
	if err := c.open(ctx); err != nil {
		return err
	}
	if _, err := provider.ParseSignal(req.Signal); err != nil {
		return updateError(err)
	}
	if err := provider.ValidateID(req.Command); err != nil {
		return updateError(fmt.Errorf("command: %w", err))
	}
	if _, ok := c.running[req.Command]; !ok {
		if e, ok := c.findEnded(req.Command); ok {
			return updateError(fmt.Errorf("%w: command %s has ended (%s)", provider.ErrBadInput, req.Command, e.describe()))
		}
		return updateError(unknown(req.Command))
	}
	return nil
}

func (c *commands) signal(ctx workflow.Context, req SignalRequest) error {
	sbx, err := c.sbx(ctx)
	if err != nil {
		return err
	}
	// A command not yet sent to the sandbox (one waiting for it to be
	// created or resumed) is signalled once it is.
	var st CommandStatus
	err = workflow.Await(ctx, func() bool {
		var ok bool
		st, ok = c.running[req.Command]
		return !ok || st.Command != ""
	})
	if err != nil || st.Command == "" {
		return err // it ended before it started: nothing to signal
	}
	return updateError(sbx.Signal(ctx, st.Command, req.Signal))
}

func (c *commands) validateAttach(_ workflow.Context, req AttachRequest) error {
	if err := provider.ValidateID(req.Command); err != nil {
		return updateError(fmt.Errorf("command: %w", err))
	}
	if _, ok := c.running[req.Command]; ok {
		return nil
	}
	if _, ok := c.findEnded(req.Command); ok {
		return nil
	}
	return updateError(unknown(req.Command))
}

func (c *commands) attach(ctx workflow.Context, req AttachRequest) (RunOutput, error) {
	err := workflow.Await(ctx, func() bool { _, ok := c.running[req.Command]; return !ok })
	if err != nil {
		return RunOutput{}, err
	}
	e, ok := c.findEnded(req.Command)
	if !ok {
		return RunOutput{}, updateError(unknown(req.Command))
	}
	if e.Kind != "" {
		return RunOutput{}, updateError(provider.Errorf(e.Kind, "%s", e.Message))
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
