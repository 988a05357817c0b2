package snapshot

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"gocloud.dev/blob"
)

// chunkSet lists the chunks in a bucket.
func chunkSet(t *testing.T, b *blob.Bucket) map[hash]bool {
	t.Helper()
	set := map[hash]bool{}
	it := b.List(&blob.ListOptions{Prefix: "chunks/"})
	for {
		obj, err := it.Next(t.Context())
		if err != nil {
			break
		}
		if h, ok := chunkFromKey(obj.Key); ok {
			set[h] = true
		}
	}
	return set
}

// referenced lists the chunks a snapshot references.
func referenced(t *testing.T, s *Store, id string) map[hash]bool {
	t.Helper()
	m, err := s.loadManifest(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	set := map[hash]bool{}
	for _, e := range m.entries {
		for _, r := range e.Chunks {
			set[r.Hash] = true
		}
	}
	return set
}

func TestGC(t *testing.T) {
	b, _ := newBucket(t)
	s := New(b)
	// later sees the same bucket two hours on, past the grace period.
	later := New(b, withClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))

	shared := t.TempDir()
	writeFile(t, filepath.Join(shared, "big"), randomBytes(7, 3<<20), 0o644, time.Now())
	writeFile(t, filepath.Join(shared, "small"), []byte("kept"), 0o644, time.Now())
	keep := mustSave(t, s, &dirSource{dir: shared}, SaveOptions{})
	writeFile(t, filepath.Join(shared, "only-in-a"), randomBytes(8, chunkSize+1), 0o644, time.Now())
	gone := mustSave(t, s, &dirSource{dir: shared}, SaveOptions{})

	kept := referenced(t, s, keep.ID)
	unique := 0
	for h := range referenced(t, s, gone.ID) {
		if !kept[h] {
			unique++
		}
	}
	if unique != 2 {
		t.Fatalf("the deleted snapshot has %d chunks of its own, want 2", unique)
	}
	if err := s.Delete(t.Context(), gone.ID); err != nil {
		t.Fatal(err)
	}

	t.Run("grace period spares fresh chunks", func(t *testing.T) {
		stats, err := s.GC(t.Context(), GCOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stats.Deleted != 0 || stats.Young != unique || stats.Snapshots != 1 {
			t.Errorf("stats %+v, want %d young and none deleted", stats, unique)
		}
	})
	t.Run("dry run", func(t *testing.T) {
		before := len(chunkSet(t, b))
		stats, err := later.GC(t.Context(), GCOptions{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		if stats.Deleted != unique || len(chunkSet(t, b)) != before {
			t.Errorf("stats %+v, %d chunks left of %d", stats, len(chunkSet(t, b)), before)
		}
	})
	t.Run("past the grace period", func(t *testing.T) {
		stats, err := later.GC(t.Context(), GCOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if stats.Deleted != unique || stats.DeletedBytes < chunkSize {
			t.Errorf("stats %+v, want %d deleted", stats, unique)
		}
		left := chunkSet(t, b)
		for h := range kept {
			if !left[h] {
				t.Errorf("referenced chunk %s deleted", h)
			}
		}
		if len(left) != len(kept) {
			t.Errorf("%d chunks left, want the %d referenced", len(left), len(kept))
		}
		want := slices.DeleteFunc(exportTar(t, shared), func(e tarEntry) bool { return e.Name == "only-in-a" })
		diffEntries(t, want, openTar(t, s, keep.ID))
	})
	t.Run("checkpoints dropped on request", func(t *testing.T) {
		cp := mustSave(t, s, &dirSource{dir: shared}, SaveOptions{Kind: KindCheckpoint, Labels: map[string]string{"owner": "wf-1"}})
		var asked []string
		stats, err := later.GC(t.Context(), GCOptions{DropCheckpoint: func(i Info) bool {
			asked = append(asked, i.ID)
			return i.Labels["owner"] == "wf-1"
		}})
		if err != nil {
			t.Fatal(err)
		}
		if len(asked) != 1 || asked[0] != cp.ID || stats.Dropped != 1 || stats.Snapshots != 1 {
			t.Errorf("asked about %q, stats %+v; want only the checkpoint, dropped", asked, stats)
		}
		if _, err := s.Stat(t.Context(), cp.ID); err == nil {
			t.Error("dropped checkpoint still there")
		}
		// Its own chunks, those of "only-in-a", went with it.
		if stats.Deleted != unique {
			t.Errorf("%d chunks deleted, want %d", stats.Deleted, unique)
		}
	})
}

func TestGCStopsOnUnreadableManifest(t *testing.T) {
	b, _ := newBucket(t)
	s := New(b)
	later := New(b, withClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), []byte("a"), 0o644, time.Now())
	info := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})
	if err := b.WriteAll(t.Context(), "manifests/garbage", []byte("not a manifest"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	_, err := later.GC(t.Context(), GCOptions{})
	wantErr(t, err, ErrCorrupt)
	if len(chunkSet(t, b)) == 0 {
		t.Error("GC deleted chunks though a manifest could not be read")
	}
}

func TestSaveRefreshesOldChunks(t *testing.T) {
	// A chunk older than half the grace period may be about to be
	// deleted by a GC, so a Save writes it again rather than rely on it.
	b, _ := newBucket(t)
	s := New(b)
	later := New(b, withClock(func() time.Time { return time.Now().Add(time.Hour) }))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big"), randomBytes(9, 2<<20), 0o644, time.Now())
	first := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{})
	if again := mustSave(t, s, &dirSource{dir: dir}, SaveOptions{}); again.Stored != 0 {
		t.Errorf("fresh chunks written again: %d bytes", again.Stored)
	}
	if old := mustSave(t, later, &dirSource{dir: dir}, SaveOptions{}); old.Stored != first.Stored {
		t.Errorf("old chunks: %d bytes written, want all %d", old.Stored, first.Stored)
	}
	// Unless the parent references them: it is not deleted while the
	// Save runs.
	if child := mustSave(t, later, &dirSource{dir: dir}, SaveOptions{Parent: first.ID}); child.Stored != 0 {
		t.Errorf("chunks of the parent written again: %d bytes", child.Stored)
	}
}
