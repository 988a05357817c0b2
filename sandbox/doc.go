// Package sandbox is the handle a Temporal workflow uses to drive a
// sandbox: create it, run commands, move files, stop it. It is layer 3
// of berth, built on the activities of package activities, which its
// API does not show: workflows need only this package (and transfer for
// the outputs results locate).
//
//	sbx, err := sandbox.New(ctx, sandbox.Provider{Name: "linux"})
//	if err != nil {
//		return err
//	}
//	defer sbx.Stop(ctx)
//	res, err := sbx.Exec(ctx, "pytest tests/")
//	// res.Stdout, res.Stderr, res.ExitCode
//
// # Lifecycle
//
// A handle is a state machine kept in workflow state. An idle sandbox is
// paused (WithIdleTimeout), then checkpointed and destroyed
// (WithHibernateAfter); the next operation resumes it. StartHibernated
// returns a handle hibernated from the start, from a snapshot: nothing
// is made until its first operation wakes it. A sandbox found
// lost is re-created from its last checkpoint (WithRecovery,
// WithCheckpointEvery) and the operation that found it returns a
// *LostError saying what was lost. Snapshot, Fork and Switch copy and
// move workspaces between sandboxes and providers; Carry and Reattach
// take a handle across continue-as-new; Reap destroys the sandboxes whose
// owner is gone.
//
// # Front ends
//
// What a sandbox stores for front ends (outputs too big for a result,
// files read, exports) they read through the relay of the workflow that
// holds the handle, and of no other: a workflow says so with
//
//	relay.Serve(ctx, func() transfer.Served { return transfer.Served{Prefixes: sbx.Served()} })
//
// # Routing
//
// A sandbox is created by a worker that serves its provider: on the
// provider's own task queue (activities.ProviderQueue), which every
// worker serving it polls; its operations then go to its host's queue.
// A provider no worker serves fails creation at once with an
// *UnservedError (bad input) naming those served. Providers asks every
// host what it serves.
//
// # Placement
//
// When several hosts serve a host-bound provider, a creation asks each
// its load and goes to the least loaded one with room (see place.go);
// a host that is full refuses it, and it is placed again; with every
// host full it waits up to WithPlacementTimeout, then fails with an
// error of kind Quota. Each handle answers its hosts, by Query and
// Update named for its sandbox: which copy it uses (a host that comes
// back destroys the others), and hibernate now (a host that stops
// drains its sandboxes so). docs/hosts.md has the whole of it.
//
// # Determinism
//
// Everything here is workflow code: no I/O, only activities. A
// sandbox's id is random, drawn once in a side effect and so kept in
// history; a command's id is the sandbox's id and the command's number
// in it. A replay or a retried activity therefore names the same
// sandbox and the same command, and a command never runs twice.
//
// # Errors
//
// Errors wrap the sentinels of package provider: errors.Is(err,
// errdefs.ErrTimeout) when a command timed out, errdefs.ErrOutOfMemory,
// errdefs.ErrBadInput for a path that leaves the workspace, and so on.
// A non-zero exit code is not an error.
package sandbox
