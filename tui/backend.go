package tui

import (
	"context"
	"io"
	"log/slog"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/session"
)

// Backend is what the UI needs from berth; berth.Sessions implements
// it. id names a session: its Info.ID, or its title when exactly one
// session has that title.
type Backend interface {
	// List lists the sessions.
	List(ctx context.Context) ([]session.Info, error)
	// Create starts a session.
	Create(ctx context.Context, req session.CreateRequest) (session.Info, error)
	// Send sends a message, returning the number of the turn that will
	// answer it once the session has accepted it.
	Send(ctx context.Context, id, message string) (turn int, err error)
	// Wait returns the session's state once its Version is past after;
	// it may also return it unchanged (when the session's workflow
	// continues as new): the UI asks again.
	Wait(ctx context.Context, id string, after int) (agent.State, error)
	// Read returns what is stored, from offset on, of a stream the
	// state names as it is written: a running call's Stdout or Stderr,
	// the turn's Stream. It returns nothing when there is nothing new
	// (or the stream is not stored yet), and at most a chunk: the UI
	// reads on from where it got to.
	Read(ctx context.Context, id, key string, offset int64) ([]byte, error)
	// Approve approves or denies the tool call awaiting approval.
	Approve(ctx context.Context, id, callID string, approve bool) error
	// Fork starts a session with a copy of another's conversation and
	// workspace, returning the new one.
	Fork(ctx context.Context, req session.ForkRequest) (session.Info, error)
	// Switch moves a session's workspace to another provider.
	Switch(ctx context.Context, req session.SwitchRequest) (session.Info, error)
	// Rename gives a session a new title.
	Rename(ctx context.Context, req session.RenameRequest) (session.Info, error)
	// Destroy ends a session, keeping its workspace as a snapshot if
	// asked.
	Destroy(ctx context.Context, req session.DestroyRequest) (session.DestroyResult, error)
}

// Options configures Run. The zero value runs on the process's terminal
// and opens on the list of sessions.
type Options struct {
	// Input and Output are the terminal; nil means standard input and
	// output. A test gives pipes.
	Input  io.Reader
	Output io.Writer
	// Session is the session to open at start, by ID or title; empty
	// opens the list.
	Session string
	// New is the request the list's "n" creates a session with (its
	// provider, approvals, ...); its zero value takes the defaults.
	New session.CreateRequest
	// Logger records the backend's errors beside the status line; nil
	// logs nothing. It must not write to the terminal the UI draws on.
	Logger *slog.Logger
	// AltScreen draws on the terminal's alternate screen, leaving the
	// shell's screen as it was on exit.
	AltScreen bool
}
