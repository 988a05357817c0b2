// Package sandboxd is berth's in-sandbox daemon and its client.
//
// The daemon runs inside a sandbox, as its first process, and serves the
// operations of [provider.Sandbox] (exec, files, workspace archives) over
// HTTP on a unix socket that only the host can reach. Self-hosted providers
// (linux namespaces, Docker, gVisor) start it after isolating it and talk
// to it with [Client]; the same code runs under every one of them.
//
// # Exec journal
//
// Every command carries an id. The daemon keeps a journal of commands by
// id: asking for an id again attaches to the running command, or returns
// the recorded result, and never runs it twice. The journal keeps each
// stream's first and last [OutputCap] bytes, so a caller that crashed can
// re-read what it missed from any offset; while a caller is attached it
// receives everything, because the command's output is held back until
// the caller has read it.
//
// # Files
//
// File operations are confined to the workspace with [os.Root], which
// resolves symbolic links without ever leaving it, so links the sandboxed
// code made, and races on them, cannot reach other files. They run with
// the file-system identity of the sandbox user, so what the daemon writes
// the user owns, and what the user cannot read the daemon will not read
// on its behalf.
package sandboxd
