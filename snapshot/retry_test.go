package snapshot

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/berth-dev/berth/errdefs"
)

// TestPartialChunkWrittenAgain: a chunk object cut short under its own
// name (a store that died in the middle of a write and kept what it
// had) is not taken for the chunk: the next save writes it again, and
// its snapshot restores whole.
func TestPartialChunkWrittenAgain(t *testing.T) {
	s, bucket := newStore(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big"), randomBytes(1, 3<<20), 0o644, time.Unix(1e9, 0))
	writeFile(t, filepath.Join(dir, "small"), []byte("small\n"), 0o644, time.Unix(1e9, 0))
	src := &dirSource{dir: dir}
	mustSave(t, s, src, SaveOptions{ID: "first"})
	var cut int
	err := filepath.WalkDir(filepath.Join(bucket, "chunks"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".attrs") {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		cut++
		return os.Truncate(path, info.Size()/2)
	})
	if err != nil || cut == 0 {
		t.Fatalf("cut the chunks short: %d cut, %v", cut, err)
	}
	// A second save of the same tree, with nothing to reuse but what
	// the bucket holds.
	info := mustSave(t, s, src, SaveOptions{ID: "second"})
	if info.Stored == 0 {
		t.Errorf("the second save stored nothing: it took the cut chunks for whole ones")
	}
	diffEntries(t, exportTar(t, dir), openTar(t, s, "second"))
}

// TestStoreUnavailable: a store that refuses connections, and one that
// accepts them and never answers, fail a Save with ErrUnavailable (kind
// StoreUnavailable) once the retry bound has passed, not at the first
// refusal and not never; nothing is saved.
func TestStoreUnavailable(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "berth")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "berth-secret")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), []byte("a\n"), 0o644, time.Unix(1e9, 0))

	// Refused: a port nothing listens on any more.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	l.Close()
	// Hung: a listener that takes connections and reads nothing.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, unanswered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()

	const retry = 3 * time.Second
	for _, tc := range []struct{ name, addr string }{{"refused", refused}, {"hung", hung.Addr().String()}} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := blob.OpenBucket(t.Context(), "s3://berth?endpoint=http://"+tc.addr+"&use_path_style=true&region=us-east-1")
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			s := New(b, WithRetry(retry), WithRequestTimeout(time.Second))
			began := time.Now()
			_, err = s.Save(t.Context(), &dirSource{dir: dir}, SaveOptions{ID: "cut-off"})
			took := time.Since(began)
			t.Logf("Save failed after %v: %v", took.Round(time.Millisecond), err)
			wantErr(t, err, ErrUnavailable)
			if k := errdefs.KindOf(err); k != errdefs.StoreUnavailable {
				t.Errorf("kind %s, want %s", k, errdefs.StoreUnavailable)
			}
			// It wraps no deadline: an activity's error that did would
			// be retried again, and the bound was the retry.
			if errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the error wraps a context's deadline: %v", err)
			}
			if took < retry {
				t.Errorf("failed after %v: before the retry bound, %v", took, retry)
			}
			if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "did not answer") {
				t.Errorf("error %q: want one line saying the store did not answer", msg)
			}
		})
	}
}
