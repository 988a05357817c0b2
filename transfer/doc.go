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
// A worker registers Interceptor, which gives every workflow it runs
// three queries: QueryRead reads a stored stream from an offset,
// QueryWrite stores one part of an upload, QueryDelete removes an export
// or an upload once read. Queries are served by the worker, never
// written to history, and reach it through the server: a client needs
// nothing but the server's address, and no path on the worker's disk.
// Only keys under the prefixes Outputs, Files, Exports and Uploads can
// be read, only uploads written, and only exports and uploads deleted.
package transfer
