package transfer

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"gocloud.dev/blob/fileblob"
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

// TestAsyncParts writes a stream with parts stored in the background and
// reads it back with parts fetched ahead: the same bytes in order, a
// part larger than what is fetched ahead read as a stream, and a missing
// part an error, never a short stream.
func TestAsyncParts(t *testing.T) {
	ctx := t.Context()
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	const key = "exports/sb/x"
	data := make([]byte, 10007)
	for i := range data {
		data[i] = byte(i * 7)
	}
	w := NewPartWriter(ctx, bucket, key, 10, 0)
	w.SetAsync(4)
	if _, err := w.Write(data[:5003]); err != nil {
		t.Fatal(err)
	}
	if err := w.FlushPartial(); err != nil { // waits for the parts under way
		t.Fatal(err)
	}
	if got, err := ReadAt(ctx, bucket, key, 10, 0, 6000); err != nil || !bytes.Equal(got, data[:5003]) {
		t.Fatalf("ReadAt after FlushPartial: %d bytes, %v; want %d", len(got), err, 5003)
	}
	if _, err := w.Write(data[5003:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Parts() != 1001 {
		t.Fatalf("%d parts, want 1001", w.Parts())
	}
	// A last part past MaxReadAhead, read as a stream.
	big := bytes.Repeat([]byte("b"), MaxReadAhead+1)
	if err := WriteObject(ctx, bucket, PartKey(key, 1001), big); err != nil {
		t.Fatal(err)
	}
	want := append(append([]byte{}, data...), big...)
	r, err := Open(ctx, bucket, Output{Blob: key, Parts: 1002, Truncated: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Open read %d bytes, %v; want the %d written", len(got), err, len(want))
	}
	// A part gone: the reader fails where it is, after what came before.
	if err := bucket.Delete(ctx, PartKey(key, 600)); err != nil {
		t.Fatal(err)
	}
	r, _ = Open(ctx, bucket, Output{Blob: key, Parts: 1002, Truncated: true})
	got, err = io.ReadAll(r)
	if err == nil || !bytes.Equal(got, data[:6000]) {
		t.Errorf("with part 600 gone, Open read %d bytes, %v; want 6000 and an error", len(got), err)
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
}

// TestAsyncPartsFail: a part the store does not take fails the writer's
// Close (or a Write after it), never a stream that only looks complete.
func TestAsyncPartsFail(t *testing.T) {
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	ctx, cancel := context.WithCancel(t.Context())
	w := NewPartWriter(ctx, bucket, "exports/sb/y", 10, 0)
	w.SetAsync(4)
	if _, err := w.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, werr := w.Write(make([]byte, 100))
	if err := w.Close(); err == nil && werr == nil {
		t.Fatal("the writer's store was gone, and Write and Close said nothing")
	}

	// The last full part fails, in the background: Close says so.
	dir := t.TempDir()
	fb, err := fileblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	if err := os.MkdirAll(filepath.Join(dir, "exports", "sb", "z", "000003", "x"), 0o755); err != nil {
		t.Fatal(err) // a directory where part 3 goes: it cannot be stored
	}
	w = NewPartWriter(t.Context(), fb, "exports/sb/z", 10, 0)
	w.SetAsync(4)
	if _, err := w.Write(make([]byte, 40)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("part 3 was not stored, and Close said nothing")
	}
}
