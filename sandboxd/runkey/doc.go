// Package runkey is berth-sandboxd's exactly-once command wrapper, for a
// remote sandbox whose provider offers only a plain exec API and no port
// through which to reach the daemon:
//
//	berth-sandboxd run --key EXEC-ID [--dir DIR] [--timeout D] -- CMD ARGS...
//
// The first call with a key starts CMD under a detached supervisor and
// journals it; a retry with the same key (the provider's exec retried after
// a dropped connection, or berth's activity retried after a worker died)
// attaches to that run and returns its result, and never starts CMD again.
//
// # The journal
//
// Each key is a directory DIR/KEY, which appears atomically: the first
// caller builds it under a temporary name, locks it, and renames it into
// place, so of two racing first calls exactly one wins and the other
// attaches. DIR is --dir, else $BERTH_RUN_DIR, else [DefaultDir] (under
// /var/tmp, which survives a restart where /tmp may not). An entry holds:
//
//	lock     flock(2)ed by the supervisor for as long as it lives
//	argv     the command, as JSON: a retry naming another command is refused
//	started  written by the supervisor just before it starts the command
//	stdout   the first --cap bytes of each stream ([DefaultCap]); bytes
//	stderr   beyond are counted, not kept
//	status   the result, as JSON, written and renamed into place at the end
//
// # The supervisor
//
// The command runs under the binary re-executed in a session of its own
// (setsid), with stdin from /dev/null, so it outlives the caller: a remote
// exec API kills its process when its connection drops. The command runs
// in the caller's directory and environment, in its own process group,
// killed (the group, with SIGKILL) when the first call's --timeout passes:
// a retry's --timeout and --cap are ignored, as it attaches to a run
// already under way.
//
// # The caller
//
// Every call, first or retry, streams the entry's stdout and stderr to its
// own as they grow, and exits as the command did: its exit code, 128+N for
// signal N, 127 when it was not found and 126 when it could not be run
// otherwise, with one line on stderr saying why. When bytes were dropped
// beyond the cap, or the run timed out, a line on stderr says so. berth's own
// errors (a bad key or flag, a journal it cannot write, a supervisor that
// died before the command finished, as when the sandbox restarted) are one
// line on stderr and exit code [ExitBerth]: the command is then never run
// again under that key, since it may have run.
//
// # Bounds
//
// Each first call prunes the journal: finished entries beyond the newest
// [Keep] or older than [MaxAge], and unfinished ones older than [MaxAge]
// whose supervisor is gone. A key retried after its entry was pruned runs its command again,
// so both bounds are far beyond any retry policy berth uses.
package runkey
