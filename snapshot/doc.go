// Package snapshot keeps portable, content-addressed, deduplicated
// workspace snapshots in a blob store (gocloud.dev/blob: file://, s3://,
// gs://, azblob://).
//
// It is plain Go, no Temporal. Activities use it to checkpoint a sandbox
// (Store.Save reads the workspace as a tar stream from a [Source]) and to
// restore one (Store.Open returns a plain tar stream that any provider's
// Import accepts, on the same provider or another).
//
// # Layout in the bucket
//
//	manifests/<id>          one per snapshot, zstd-compressed
//	chunks/<hh>/<sha256>    file contents, zstd-compressed
//
// A manifest's first line is its header in JSON (kind, labels, times,
// totals), so Stat and List read only that. The tree entries follow in
// tar order, in a compact binary form: path, type, mode, mtime, size, link
// target, and for regular files the chunk references holding their bytes.
//
// A chunk is named by the SHA-256 of its uncompressed bytes. Files of
// 256 KiB and more are cut into fixed 4 MiB chunks; smaller files are
// packed together, many to a chunk of up to 4 MiB, and found again by the
// hash of their own contents. Chunks already in the store are not written
// again, so a second snapshot of a workspace stores only what changed.
// A hole of a sparse file, whatever its length, is one reference to no
// chunk, and so is a chunk of zeros: neither stored nor fetched, and
// restored as a hole. A sparse file's data is read without its holes
// (the source's tar stream carries only the data; see
// internal/sparsetar), so a Save costs the data, not the file's size.
//
// # Apparent size
//
// A file larger than WithMaxFileSize (16 TiB), holes included, or past
// WithMaxTotalSize (64 TiB) for the whole snapshot, is left out, as is a
// file the source left out: Save names them in Info.SkippedPaths rather
// than fail, so that a workspace cannot make its checkpoints fail.
//
// # Incremental saves
//
// Save with a Parent reuses the parent's chunks without asking the store.
// When the parent was saved from the same source (SaveOptions.Source),
// the source is also told when the parent started, and may send files
// whose status has not changed since then as headers only (see
// [UnchangedRecord]): those are neither moved nor hashed again.
//
// # Garbage collection
//
// Delete removes only a manifest. GC removes the chunks no manifest
// references, sparing those written within the grace period (see
// [WithGracePeriod]) so that a Save in flight never loses one.
//
// # A store that fails
//
// Every request to the bucket is bounded (WithRequestTimeout, 1 minute)
// and retried with a backoff while the store refuses, fails or hangs,
// until WithRetry (2 minutes) has passed since the first failed attempt
// began; then the operation fails with an error wrapping
// [ErrUnavailable]. The manifest is written last, in one request, so a
// Save cut off anywhere leaves no snapshot, only chunks a GC removes; a
// chunk found in the bucket is reused only at the size this Save
// compressed it to, so that one a store kept half written is written
// again.
//
// # Trust
//
// Everything read back from the bucket, and every path in a source's tar
// stream, is treated as hostile: chunk hashes are checked after
// decompression, sizes are bounded, and paths must be plain relative
// paths inside the workspace. Failures wrap [ErrNotFound], [ErrCorrupt]
// or [ErrBadInput].
package snapshot
