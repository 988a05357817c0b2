// Package relay is transfer's relay: the worker interceptor through which
// a front end reads and writes a workflow's streams in the blob store
// through the Temporal server alone. The protocol's names and types are
// package transfer's; this package is the part that links the Temporal
// SDK.
//
// A worker registers Interceptor, which lets a front end reach the blob
// store through the Temporal server alone, never a path on the worker's
// disk, and only for what the workflow it names owns. A workflow says
// what it owns with Serve (the sandbox handle's prefixes, a session's
// model streams, whether it takes uploads); the relay asks it before
// each operation and refuses anything else (BadInput). transfer.QueryRead reads
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
package relay
