// Package transfer is how bytes too big for workflow history move in
// berth: a stream (a command's output, an exported archive, an upload)
// is cut into parts in a blob store, and an Output carries its head and
// tail inline with a reference to the whole. The relay (package
// transfer/relay) lets a front end read and write those parts through
// the Temporal server alone.
//
// # Parts
//
// A stream stored under key K is the objects K/000000, K/000001, ...
// of PartSize bytes each (the last one shorter). While the stream is
// being written, the part under way is also stored, as it grows, in
// K/NNNNNN.partial, so that a reader can follow it live. Retries of a
// writer write the same keys: nothing is left behind by a retry.
//
// # Protocol
//
// The names and JSON of the relay's Queries and Updates (QueryRead,
// UpdateWrite, ReadRequest, SignedURLs, ...) are here, as plain data; the
// relay itself, which links the Temporal SDK, is package transfer/relay.
// A program that only reads outputs and streams links no Temporal SDK.
package transfer
