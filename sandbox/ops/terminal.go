package ops

import (
	"fmt"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/workflow"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
)

// A command an UpdateExec runs on a terminal (ExecRequest.TTY) takes its
// input from the upload stream transfer.TerminalInputKey(workflow id,
// update id): the front end that sent the Update writes one
// transfer.TerminalEvent per part, through the relay, which keeps them
// out of history. Its output is the command's stdout, followed live
// like any command's (SandboxStatus.Running).

// validateTerminal refuses what a command on a terminal cannot have.
func validateTerminal(req ExecRequest) error {
	if req.TTY != nil && len(req.Stdin) > 0 {
		return fmt.Errorf("%w: a command on a terminal takes its input through the terminal, not stdin", errdefs.ErrBadInput)
	}
	return nil
}

// terminalOption runs the command of Update update on a terminal.
func terminalOption(ctx workflow.Context, size provider.TerminalSize, update string) sandbox.ExecOption {
	key, err := transfer.TerminalInputKey(workflow.GetInfo(ctx).WorkflowExecution.ID, update)
	if err != nil {
		// A workflow that takes no uploads: the terminal gets no input.
		key = ""
	}
	return sandbox.WithTerminal(size, key)
}
