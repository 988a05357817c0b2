// Package transfer is how bytes too big for workflow history move in
// berth: a stream (a command's output, an exported archive, an upload)
// is cut into parts in a blob store, an Output carries its head and
// tail inline with a reference to the whole, and a relay lets a front
// end read and write those parts through the Temporal server alone.
//
// # Parts
//
// A stream stored under key K is the objects K/000000, K/000001, ...
// of PartSize bytes each (the last one shorter). While the stream is
// being written, the part under way is also stored, as it grows, in
// K/NNNNNN.partial, so that a reader can follow it live. Retries of a
// writer write the same keys: nothing is left behind by a retry.
//
// # Relay
//
// A worker registers Interceptor, which lets a front end reach the blob
// store through the Temporal server alone, never a path on the worker's
// disk, and only for what the workflow it names owns. A workflow says
// what it owns with Serve (the sandbox handle's prefixes, a session's
// model streams, whether it takes uploads); the relay asks it before
// each operation and refuses anything else (BadInput). QueryRead reads
// a stored stream from an offset: a read, and a Query. UpdateWrite
// stores one part of an upload, UpdateDelete removes an export or an
// upload: writes, and Updates, which Temporal's authorizer tells from
// reads. Their validator does the work and then rejects the Update with
// Stored, which the client takes for success: a rejected Update writes
// nothing to history, so the data never enters it, and validators do
// not run on replay. A workflow's uploads are bounded (Limits) and
// expire: the reaper removes what is older than an hour.
//
// # Signed URLs
//
// Where the store is one front ends reach themselves (Limits.Sign), the
// relay also signs URLs of parts, checked as the read or write they
// grant: QuerySign for GETs of the workflow's own streams, UpdateSign,
// rejected with Signed and the URLs, for PUTs of its own upload parts,
// each of an exact, signed size counted against the upload bounds until
// it expires. A store that cannot sign answers NotSignable; the relay is
// the fallback for anything the direct path cannot do.
package transfer
