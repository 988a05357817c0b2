package calls

import (
	"testing"

	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/errdefs/temporalerr"
)

// CopyBlobs and DeleteBlobs touch only the prefixes workflows own, and
// DeleteBlobs deletes what is under its prefix, nothing beside it.
func TestOwnedBlobs(t *testing.T) {
	bucket, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	a := &Activities{Outputs: bucket}
	ctx := t.Context()
	for _, key := range []string{"conversations/a/1", "conversations/ab/1", "outputs/agent/a/turn-1", "outputs/sb/stdout"} {
		if err := a.Outputs.WriteAll(ctx, key, []byte(key), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []string{"conversations/", "conversations", "outputs/", "outputs/sb/", "snapshots/x/",
		"conversations/../outputs/", "conversations//", "outputs/agent/./", "conversations/a"} {
		if err := a.DeleteBlobs(ctx, bad); errdefs.KindOf(temporalerr.From(err)) != errdefs.BadInput {
			t.Errorf("DeleteBlobs(%q): %v, want BadInput", bad, err)
		}
	}
	if err := a.CopyBlobs(ctx, []BlobCopy{{From: "outputs/sb/stdout", To: "conversations/b/1"}}); errdefs.KindOf(temporalerr.From(err)) != errdefs.BadInput {
		t.Errorf("copying a command's output: %v, want BadInput", err)
	}
	if err := a.CopyBlobs(ctx, []BlobCopy{{From: "conversations/a/1", To: "conversations/b/1"}}); err != nil {
		t.Fatal(err)
	}
	if err := a.CopyBlobs(ctx, []BlobCopy{{From: "conversations/a/none", To: "conversations/b/2"}}); errdefs.KindOf(temporalerr.From(err)) != errdefs.NotFound {
		t.Errorf("copying a missing blob: %v, want NotFound", err)
	}
	for _, prefix := range []string{"conversations/a/", "outputs/agent/a/"} {
		if err := a.DeleteBlobs(ctx, prefix); err != nil {
			t.Fatal(err)
		}
	}
	for key, want := range map[string]bool{"conversations/a/1": false, "outputs/agent/a/turn-1": false,
		"conversations/ab/1": true, "conversations/b/1": true, "outputs/sb/stdout": true} {
		if ok, err := a.Outputs.Exists(ctx, key); err != nil || ok != want {
			t.Errorf("%s exists: %v (%v), want %v", key, ok, err, want)
		}
	}
}
