// Package tools is the coding agent's tools: shell, read_file,
// write_file, edit_file, apply_patch and list_files, run against a
// Workspace, the session's sandbox (OnSandbox) or, in tests, a host
// directory (Dir).
//
// Definitions describes them to the model; Run runs one call and
// returns what the model is to read: the output, or what went wrong and
// how to do better, never more than MaxOutput bytes, with a note saying
// what was cut and how to see the rest. Instructions adds AGENTS.md,
// from the workspace's root, to the agent's instructions.
// DefinitionsAt and RunAt are those of an earlier Version, for a
// workflow whose history began with it.
//
// Run is deterministic given what the workspace answers, and starts no
// goroutine: a workflow may call it, with OnSandbox's workspace, whose
// operations are the sandbox handle's activities.
//
// # Patches
//
// apply_patch takes a unified diff, as git diff or diff -u writes it:
// changed, new, deleted and renamed files. Every file is read and every
// hunk checked before anything is written; then all the new contents
// are written at once, and deleted files removed. A patch that does not
// apply changes nothing and says which hunk failed and why.
package tools
