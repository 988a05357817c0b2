// Package activities holds berth's Temporal activities: thin, idempotent
// steps over a provider, one per sandbox operation. It is layer 2 of
// berth; workflows reach it through package sandbox, never directly.
//
// # Idempotence
//
// Every activity may run more than once: Temporal retries it when a
// worker dies mid-way. Create is idempotent by sandbox id, and Exec by
// command id: a retried Exec attaches to the command already under way
// in the sandbox's journal, from the output offsets its last heartbeat
// recorded, and never runs the command twice.
//
// # Errors
//
// Provider errors become Temporal application errors here, and only
// here (through errdefs/temporalerr), typed by their errdefs.Kind
// ("BadInput", "SandboxLost", ...). Kinds a retry cannot fix are
// non-retryable.
//
// # Output
//
// A command's output streams into a blob store as it is produced, in
// parts, so a retry after a crash keeps what was already stored. The
// activity's result carries each stream's head and tail inline, up to a
// cap, and a reference to the whole: workflow history stays small however
// much a command prints.
package activities
