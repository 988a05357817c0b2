// Package provider defines what berth asks of a place where isolated
// sandboxes live: create one from a [Spec], run commands in it with output
// streamed as it is produced, move files in and out, and destroy it.
//
// It is layer 1 of berth: plain Go, no Temporal. Backends (provider/linux,
// provider/docker, cloud vendors) implement [Provider] and [Sandbox] and
// register themselves by name with [Register]; front ends open them with
// [Open]. Optional features a backend may have natively, such as pausing,
// are separate interfaces ([Pauser]) found by type assertion, and announced
// in [Capabilities].
//
// # Lifecycle
//
// A sandbox is created running. While running it accepts every operation.
// A paused sandbox ([Pauser]) keeps its memory and processes but runs
// nothing; operations other than Resume, Info and Destroy fail with
// [errdefs.ErrSandboxPaused]. A sandbox whose backing machinery died (its
// daemon was killed, its host rebooted) is lost: operations fail with
// [errdefs.ErrSandboxLost] and only Destroy is useful. Destroy is final and idempotent; afterwards the
// id is unknown ([errdefs.ErrNotFound]).
//
// # Errors
//
// Every error a backend returns for a known condition wraps one of
// berth's sentinel errors (package errdefs: [errdefs.ErrNotFound],
// [errdefs.ErrBadInput], ...), so callers test them with [errors.Is]
// whatever the backend. [errdefs.KindOf] names the condition as a stable
// string, for crossing process boundaries.
//
// # Paths
//
// Paths name files in the sandbox's workspace. A relative path is taken
// from the workspace root; an absolute path must lie inside [Workspace].
// A path that leaves the workspace, by "..", by an absolute name outside
// it, or through a symbolic link, is bad input.
package provider
