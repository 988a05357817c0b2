package snapshot

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

var _ Source = SandboxSource(provider.Sandbox(nil))

func TestRoundTrip(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	trickyTree(t, dir)

	var mu sync.Mutex
	var last Progress
	info := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{
		Labels:   map[string]string{"sandbox": "sb-1"},
		Progress: func(p Progress) { mu.Lock(); last = p; mu.Unlock() },
	})
	want := exportTar(t, dir)

	t.Run("info", func(t *testing.T) {
		if info.Kind != KindUser || info.Labels["sandbox"] != "sb-1" || info.Created.IsZero() {
			t.Errorf("info %+v", info)
		}
		// Eight regular files; the hard link is not one more.
		if info.Files != 8 || info.Size != 20<<20+29+4+18+0+9+13+13 {
			t.Errorf("%d files of %d bytes", info.Files, info.Size)
		}
		if last.Files != int64(info.Files) || last.Bytes != info.Size || last.Transferred != info.Stored {
			t.Errorf("last progress %+v, info %+v", last, info)
		}
		stat, err := s.Stat(t.Context(), info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if stat.ID != info.ID || !stat.Created.Equal(info.Created) || stat.Size != info.Size || stat.Stored != info.Stored {
			t.Errorf("Stat %+v, Save said %+v", stat, info)
		}
		list, err := s.List(t.Context())
		if err != nil || len(list) != 1 || list[0].ID != info.ID {
			t.Errorf("List: %v, %v", list, err)
		}
	})
	t.Run("stream", func(t *testing.T) {
		// The stream is the source's, entry for entry: names, types,
		// modes, mtimes to the nanosecond, link targets and contents.
		diffEntries(t, want, openTar(t, s, info.ID))
	})
	t.Run("unpacked", func(t *testing.T) {
		out := t.TempDir()
		rc, err := s.Open(t.Context(), info.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		untar(t, rc, out)
		rc.Close()
		// Exporting the unpacked tree gives the same stream again: the
		// hard link is a hard link, the empty directories are there.
		diffEntries(t, want, exportTar(t, out))
	})
}

func TestSaveUnchangedStoresNothing(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	trickyTree(t, dir)
	first := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})
	if first.Stored < 12<<20 {
		t.Fatalf("first save stored %d bytes, want at least the 12 MiB that do not compress", first.Stored)
	}
	for _, parent := range []string{first.ID, ""} {
		second := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{Parent: parent})
		if second.Stored != 0 || second.Parent != parent {
			t.Errorf("parent %q: second save stored %d bytes, parent %q", parent, second.Stored, second.Parent)
		}
		diffEntries(t, exportTar(t, dir), openTar(t, s, second.ID))
	}
}

func TestSmallChangeStoresOneChunk(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	trickyTree(t, dir)
	first := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})

	// One byte in the middle of the big file, one small file.
	f, err := os.OpenFile(filepath.Join(dir, "big.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'!'}, 5<<20+17); err != nil {
		t.Fatal(err)
	}
	f.Close()
	writeFile(t, filepath.Join(dir, "src/main.go"), []byte("package main // changed\n"), 0o644, time.Now())

	second := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{Parent: first.ID})
	// One 1 MiB chunk that does not compress, and a pack holding the one
	// changed small file.
	if second.Stored < chunkSize || second.Stored > chunkSize+4<<10 {
		t.Errorf("stored %d bytes, want one chunk of %d and a little", second.Stored, chunkSize)
	}
	diffEntries(t, exportTar(t, dir), openTar(t, s, second.ID))
}

func TestUnchangedMarks(t *testing.T) {
	// A margin of 1ns: the files were all written before the first save
	// started, so the second save's since is after their ctimes.
	s, _ := newStore(t, WithClockMargin(time.Nanosecond))
	dir := t.TempDir()
	trickyTree(t, dir)
	opts := SaveOptions{Source: "test/sb-1", Kind: KindCheckpoint}
	first := mustSave(t, s, &dirSource{dir: dir, marks: true}, opts)

	t.Run("nothing changed", func(t *testing.T) {
		src := &dirSource{dir: dir, marks: true}
		opts := opts
		opts.Parent = first.ID
		second := mustSave(t, s, src, opts)
		if n := src.sent.Load(); n != 0 || second.Stored != 0 {
			t.Errorf("source sent %d bytes, %d stored; want none", n, second.Stored)
		}
		if second.Size != first.Size || second.Files != first.Files {
			t.Errorf("second: %d files of %d bytes, first %d of %d", second.Files, second.Size, first.Files, first.Size)
		}
		diffEntries(t, exportTar(t, dir), openTar(t, s, second.ID))
	})
	t.Run("another source", func(t *testing.T) {
		src := &dirSource{dir: dir, marks: true}
		opts := opts
		opts.Parent, opts.Source = first.ID, "test/sb-2"
		mustSave(t, s, src, opts)
		if src.sent.Load() != first.Size {
			t.Errorf("source sent %d bytes, want all %d: since must not be used across sources", src.sent.Load(), first.Size)
		}
	})
	t.Run("one file changed", func(t *testing.T) {
		data := []byte("changed after the first save")
		writeFile(t, filepath.Join(dir, "src/deep/er/still/file.txt"), data, 0o600, time.Now())
		src := &dirSource{dir: dir, marks: true}
		opts := opts
		opts.Parent = first.ID
		third := mustSave(t, s, src, opts)
		if src.sent.Load() != int64(len(data)) || len(src.readFiles()) != 0 {
			t.Errorf("source sent %d bytes and was asked for %q; want only the changed file's %d", src.sent.Load(), src.readFiles(), len(data))
		}
		diffEntries(t, exportTar(t, dir), openTar(t, s, third.ID))
	})
	t.Run("marked but not in the parent", func(t *testing.T) {
		// The parent lacks one file and holds another with another
		// mtime: both are read with ReadFile.
		writeFile(t, filepath.Join(dir, "new.txt"), []byte("new"), 0o644, time.Now())
		if err := os.Chtimes(filepath.Join(dir, "dup-a.txt"), time.Unix(1, 0), time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
		src := &dirSource{dir: dir, markAll: true}
		opts := opts
		opts.Parent = first.ID
		info := mustSave(t, s, src, opts)
		got := src.readFiles()
		slices.Sort(got)
		if want := []string{"dup-a.txt", "new.txt", "src/deep/er/still/file.txt"}; !slices.Equal(got, want) {
			t.Errorf("ReadFile asked for %q, want %q", got, want)
		}
		diffEntries(t, exportTar(t, dir), openTar(t, s, info.ID))
	})
}

func TestSaveWithIDIsIdempotent(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), []byte("a"), 0o644, time.Now())
	first := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{ID: "cp-1"})
	src := &dirSource{dir: dir}
	again := mustSave(t, s, src, SaveOptions{ID: "cp-1"})
	if again.ID != "cp-1" || !again.Created.Equal(first.Created) || src.sent.Load() != 0 {
		t.Errorf("second Save with the same id: %+v (first %+v), source sent %d bytes", again, first, src.sent.Load())
	}
}

func TestNotFound(t *testing.T) {
	s, _ := newStore(t)
	_, err := s.Open(t.Context(), "nope", nil)
	wantErr(t, err, ErrNotFound)
	_, err = s.Stat(t.Context(), "nope")
	wantErr(t, err, ErrNotFound)
	if err := s.Delete(t.Context(), "nope"); err != nil {
		t.Errorf("Delete of a missing snapshot: %v", err)
	}
	_, err = s.Open(t.Context(), "../manifests/x", nil)
	wantErr(t, err, ErrBadInput)

	// A missing parent only costs the reuse.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), []byte("a"), 0o644, time.Now())
	info := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{Parent: "gone"})
	if info.Parent != "" {
		t.Errorf("parent %q, want none", info.Parent)
	}
}

func TestCancelStopsSave(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Save(ctx, endlessSource{after: 8 << 20, call: cancel}, SaveOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		wantErr(t, err, context.Canceled)
	case <-time.After(20 * time.Second):
		t.Fatal("Save still running 20s after its context was cancelled")
	}
	if list, err := s.List(t.Context()); err != nil || len(list) != 0 {
		t.Errorf("List after a cancelled Save: %v, %v", list, err)
	}
}

func TestOpenCloseEarly(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	trickyTree(t, dir)
	info := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})
	rc, err := s.Open(t.Context(), info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.Read(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil { // returns once the restore stopped
		t.Fatal(err)
	}
}

func TestSaveBadOptions(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts SaveOptions
	}{
		{"kind", SaveOptions{Kind: "forever"}},
		{"label", SaveOptions{Labels: map[string]string{"a=b": "c"}}},
		{"id", SaveOptions{ID: "../x"}},
		{"parent", SaveOptions{Parent: "a/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &dirSource{dir: dir}
			_, err := s.Save(t.Context(), src, tc.opts)
			wantErr(t, err, ErrBadInput)
		})
	}
}

func TestCancelStopsOpen(t *testing.T) {
	s, _ := newStore(t)
	dir := t.TempDir()
	trickyTree(t, dir)
	info := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	rc, err := s.Open(ctx, info.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Read(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, err = io.Copy(io.Discard, rc)
	wantErr(t, err, context.Canceled)
}
