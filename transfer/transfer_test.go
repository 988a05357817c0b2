package transfer

import (
	"bytes"
	"io"
	"testing"

	"gocloud.dev/blob/memblob"
)

// TestReadAt reads a stream while it is written: complete parts, then
// the partial object of the part under way, from any offset.
func TestReadAt(t *testing.T) {
	ctx := t.Context()
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	const partSize = 10
	w := NewPartWriter(ctx, bucket, "outputs/sb/c1/stdout", partSize, 0)
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	if _, err := w.Write(data[:25]); err != nil {
		t.Fatal(err)
	}
	if err := w.FlushPartial(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		off  int64
		max  int
		want string
	}{
		{0, 100, string(data[:25])}, // two parts and a partial one
		{7, 5, "789ab"},             // across a part's end
		{22, 100, "mno"},            // within the partial part
		{25, 100, ""},               // nothing yet
	} {
		got, err := ReadAt(ctx, bucket, "outputs/sb/c1/stdout", partSize, c.off, c.max)
		if err != nil || string(got) != c.want {
			t.Errorf("ReadAt(%d, %d) = %q, %v; want %q", c.off, c.max, got, err, c.want)
		}
	}
	if _, err := w.Write(data[25:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, _ := bucket.Exists(ctx, PartialKey("outputs/sb/c1/stdout", 2)); ok {
		t.Error("the partial object outlived its part")
	}
	r, err := Open(ctx, bucket, Output{Blob: "outputs/sb/c1/stdout", Parts: w.Parts(), Truncated: true})
	if err != nil {
		t.Fatal(err)
	}
	whole, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(whole, data) {
		t.Errorf("Open read %q, %v; want %q", whole, err, data)
	}
	if err := DeleteParts(ctx, bucket, "outputs/sb/c1/stdout", w.Parts()); err != nil {
		t.Fatal(err)
	}
	if l, _ := bucket.List(nil).Next(ctx); l != nil {
		t.Errorf("%s left after DeleteParts", l.Key)
	}
}
