package tui

import (
	"context"
	"errors"

	tea "github.com/charmbracelet/bubbletea"

	// Before Bubble Tea's init, which would ask the terminal for its
	// background colour in every program that links this package.
	_ "github.com/berth-dev/berth/tui/termbg"
)

// Run runs the UI until the person quits or ctx ends. Quitting leaves
// the sessions running.
func Run(ctx context.Context, b Backend, opts Options) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the Wait in flight
	popts := []tea.ProgramOption{tea.WithContext(ctx)}
	if opts.Input != nil {
		popts = append(popts, tea.WithInput(opts.Input))
	}
	if opts.Output != nil {
		popts = append(popts, tea.WithOutput(opts.Output))
	}
	if opts.AltScreen {
		popts = append(popts, tea.WithAltScreen())
	}
	_, err := tea.NewProgram(newModel(ctx, b, opts), popts...).Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
