package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob/memblob"

	"github.com/berth-dev/berth/transfer"
)

// TestServedKeys: a workflow reads only the streams under its own
// prefixes, uploads only under its own upload prefix, one element deep.
func TestServedKeys(t *testing.T) {
	s := transfer.Served{Prefixes: []string{"outputs/sb-a/", "exports/sb-a/", "files/sb-a-2/"}, Uploads: true}
	for _, key := range []string{"outputs/sb-a/c1/stdout", "exports/sb-a/x", "files/sb-a-2/f"} {
		if err := reads(s, key, "wf-a"); err != nil {
			t.Errorf("read %q: %v", key, err)
		}
	}
	for _, key := range []string{
		"outputs/sb-b/c1/stdout",     // another sandbox's
		"outputs/sb-ab/c1/stdout",    // a prefix of a name is not the name
		"outputs/sb-a/../sb-b/c1/x",  // climbs out
		"outputs/sb-a/",              // the prefix itself
		"uploads/wf-a/u1",            // uploads are not read
		"snapshots/x", "/etc/passwd", // not streams
		"outputs/sb-a/c1\x00",
	} {
		err := reads(s, key, "wf-a")
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != transfer.BadInput || !app.NonRetryable() {
			t.Errorf("read %q: %v, want a non-retryable %s", key, err, transfer.BadInput)
		}
	}
	for _, c := range []struct {
		key, workflow string
		ok            bool
	}{
		{"uploads/wf-a/u1", "wf-a", true},
		{"uploads/wf-b/u1", "wf-a", false},   // another workflow's
		{"uploads/wf-a/u1/x", "wf-a", false}, // not one element
		{"uploads/wf-a/../x", "wf-a", false}, // climbs out
		{"uploads/wf-a", "wf-a", false},      // the prefix itself
		{"uploads/a/b/u1", "a/b", false},     // not under the escaped id
		{"uploads/a%2Fb/u1", "a/b", true},    // a session's id, escaped
		{"outputs/sb-a/c1", "wf-a", false},   // not an upload
	} {
		_, err := upload(s, c.key, c.workflow)
		if (err == nil) != c.ok {
			t.Errorf("upload %q by %s: %v", c.key, c.workflow, err)
		}
	}
	if _, err := upload(transfer.Served{}, "uploads/wf-a/u1", "wf-a"); err == nil {
		t.Error("a workflow that takes no uploads took one")
	}
}

// TestUploadPrefix: every workflow id, a session's (manager/s1) too,
// has its own upload prefix, one clean path element under uploads/; an
// id of safe bytes keeps the prefix it always had.
func TestUploadPrefix(t *testing.T) {
	for _, c := range []struct{ id, want string }{
		{"sbx-1a2b", "uploads/sbx-1a2b/"},
		{"my.box_2", "uploads/my.box_2/"},
		{"berth-sessions/s1", "uploads/berth-sessions%2Fs1/"},
		{".", "uploads/%2E/"},
		{"..", "uploads/%2E%2E/"},
		{"a..b", "uploads/a%2E%2Eb/"},
		{"../x", "uploads/%2E%2E%2Fx/"},
		{"a\\b\x00", "uploads/a%5Cb%00/"},
		{"100%", "uploads/100%25/"},
	} {
		got, err := transfer.UploadPrefix(c.id)
		if err != nil || got != c.want {
			t.Errorf("transfer.UploadPrefix(%q) = %q, %v; want %q", c.id, got, err, c.want)
		}
	}
	if _, err := transfer.UploadPrefix(""); err == nil {
		t.Error("an empty id took an upload prefix")
	}
	// No two ids share a prefix, and each is one element that the
	// relay's own key check takes.
	ids := []string{"a/b", "a%2Fb", "a%252Fb", "a_b", "a.b", "a..b", "a%2E%2Eb", ".", "%2E", "..", "s1", "m/s1", "m%2Fs1",
		"/", "//", "a/", "/a", "\\", "é", "%C3%A9", " ", "%20"}
	seen := map[string]string{}
	for _, id := range ids {
		p, err := transfer.UploadPrefix(id)
		if err != nil {
			t.Fatalf("transfer.UploadPrefix(%q): %v", id, err)
		}
		if other, ok := seen[p]; ok {
			t.Errorf("%q and %q share the prefix %q", id, other, p)
		}
		seen[p] = id
		elem := strings.TrimSuffix(strings.TrimPrefix(p, transfer.Uploads), "/")
		if elem == "" || strings.Contains(elem, "/") {
			t.Errorf("transfer.UploadPrefix(%q) = %q: not one path element", id, p)
		}
		if err := transfer.CheckUpload(p + "u1"); err != nil {
			t.Errorf("an upload of %q: %v", id, err)
		}
		if _, err := upload(transfer.Served{Uploads: true}, p+"u1", id); err != nil {
			t.Errorf("the relay refuses %q's own upload: %v", id, err)
		}
	}
}

// TestDeleteStream removes every object of a stream, and nothing beside.
func TestDeleteStream(t *testing.T) {
	ctx := t.Context()
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	for _, k := range []string{"exports/sb/x/000000", "exports/sb/x/000001.partial", "exports/sb/x/000007", "exports/sb/xy/000000"} {
		if err := bucket.WriteAll(ctx, k, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := deleteStream(ctx, bucket, "exports/sb/x")
	if err != nil || len(gone) != 3 {
		t.Fatalf("deleted %v, %v; want the 3 objects of exports/sb/x", gone, err)
	}
	if ok, _ := bucket.Exists(ctx, "exports/sb/xy/000000"); !ok {
		t.Error("another stream was deleted")
	}
}

// TestUsage counts a part written again once.
func TestUsage(t *testing.T) {
	u := &usage{size: map[string]int64{}}
	u.set("k/000000", 10)
	u.set("k/000001", 5)
	if b, n := u.with([]string{"k/000000"}, []int64{3}); b != 8 || n != 2 {
		t.Errorf("with a part replaced: %d bytes in %d parts, want 8 in 2", b, n)
	}
	if b, n := u.with([]string{"k/000002"}, []int64{3}); b != 18 || n != 3 {
		t.Errorf("with a new part: %d bytes in %d parts, want 18 in 3", b, n)
	}
	if b, n := u.with([]string{"k/000001", "k/000002"}, []int64{1, 3}); b != 14 || n != 3 {
		t.Errorf("with a part replaced and a new one: %d bytes in %d parts, want 14 in 3", b, n)
	}
	u.drop("k/000000")
	if u.bytes != 5 || len(u.size) != 1 {
		t.Errorf("after a drop: %d bytes in %d parts, want 5 in 1", u.bytes, len(u.size))
	}
}

// TestUsageSigned: a part signed for counts until its URL expires,
// deleted or not, and across a fresh count.
func TestUsageSigned(t *testing.T) {
	u := &usage{size: map[string]int64{}}
	u.sign("k/000000", 10, time.Now().Add(time.Hour))
	u.sign("k/000001", 7, time.Now().Add(-time.Second))
	u.drop("k/000000")
	u.drop("k/000001")
	if u.bytes != 10 || len(u.size) != 1 {
		t.Errorf("after drops: %d bytes in %d parts, want 10 in 1 (the unexpired signed part)", u.bytes, len(u.size))
	}
	fresh := &usage{size: map[string]int64{"k/000002": 1}, bytes: 1}
	fresh.keepSigned(u)
	if fresh.bytes != 11 || len(fresh.size) != 2 {
		t.Errorf("a fresh count: %d bytes in %d parts, want 11 in 2", fresh.bytes, len(fresh.size))
	}
}
