package snapshot_test

import (
	"context"
	"fmt"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets; s3blob, gcsblob... for the others

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/snapshot"
)

// Checkpoint a sandbox, then restore the checkpoint into another one,
// which may live on another provider.
func Example() {
	ctx := context.Background()
	var sb, other provider.Sandbox // from their providers
	var last string                // the id of sb's previous checkpoint, if any

	bucket, err := blob.OpenBucket(ctx, "file:///var/lib/berth/snapshots")
	if err != nil {
		panic(err)
	}
	defer bucket.Close()
	store := snapshot.New(bucket)

	info, err := store.Save(ctx, snapshot.SandboxSource(sb), snapshot.SaveOptions{
		Kind:   snapshot.KindCheckpoint,
		Labels: map[string]string{"sandbox": sb.ID()},
		Parent: last,               // reuse what it stored
		Source: "linux/" + sb.ID(), // as the parent's: only changes are read
	})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d files, %d bytes, %d new bytes stored\n", info.Files, info.Size, info.Stored)

	rc, err := store.Open(ctx, info.ID, nil)
	if err != nil {
		panic(err)
	}
	defer rc.Close()
	if err := other.Import(ctx, rc); err != nil {
		panic(err)
	}
}
