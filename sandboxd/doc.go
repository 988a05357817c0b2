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
// Every operation on the workspace's contents (read, write, list,
// remove, export, import) runs confined, on an OS thread of its own that
// ends with it: with the sandbox user's uid, gid and no supplementary
// groups or capabilities, and, where the daemon may chroot (linux and
// gvisor), with the workspace as its root directory. So what the daemon
// writes the user owns, what the user cannot read the daemon will not
// read on its behalf, and no path, link or rename a command makes, even
// while an operation walks the tree, can take it out of the workspace,
// whatever the kernel makes of O_NOFOLLOW. Paths are resolved with
// [os.Root], which refuses links that lead out of the workspace; below
// the top, exports check that each directory they open is the one they
// listed, and removals go by open directories and never follow links.
// An export holds what the sandbox user can read: a file or directory
// the user cannot read is left out (a directory keeps its entry, empty).
// A removal gives a directory the user made read-only back its owner's
// rights first, as the user could.
package sandboxd
