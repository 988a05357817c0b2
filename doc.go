// Package berth drives berth from any Go program, as the berth command
// does: standalone sandboxes, one-shot runs, their live output, and
// copies in and out of sandboxes of any size. It needs nothing but a
// Temporal client: operations are Workflow Updates, and outputs and
// transfers travel through the server, never through a path on a
// worker's disk.
//
//	c := berth.New(temporalClient)
//	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{Provider: "linux"})
//	if err != nil { ... }
//	defer sb.Stop(ctx)
//	res, err := sb.Exec(ctx, []string{"pytest", "-q"}, berth.ExecOptions{Stdout: os.Stdout})
//
// Sandboxes creates, finds and lists sandboxes; a Sandbox runs commands
// (Exec waits, Start returns a Command to Wait for, Follow, Kill or
// Attach to later), moves files (WriteFiles, ReadFile, Import and
// Export of tar trees) and changes state (Snapshot, Fork, Switch,
// Pause, Resume, Hibernate, Stop). Run starts a one-shot run; Snapshots
// and Providers ask the workers; Sessions drives coding agent sessions.
// docs/sdk.md is the reference, docs/protocol.md the wire beneath.
//
// # Riding out a server restart
//
// Every operation keeps its Update id (or its request) and retries while
// the server is unavailable, for at most RetryFor, then fails with an
// *UnavailableError saying whether the operation may have run and how to
// see its result. An operation sent again with the same Update id is
// never run twice: the server answers it from the first one.
//
// # Errors
//
// The errors its calls return carry berth's error kinds, whatever
// Temporal wrapped them in: a program tests
//
//	if berth.KindOf(err) == berth.NotFound { ... }
//
// and OneLine renders one in a line, as berth does. A command that exits
// non-zero, times out or runs out of memory is no error: its Result says
// so (ExitCode, Signal, Kind).
//
// # Partial data
//
// An output that cannot be had whole is an error (ErrIncomplete), never
// a silent truncation: what could be had is written, and the error says
// how much is missing.
package berth
