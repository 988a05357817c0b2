package runkey

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// entry makes a journal entry named name last changed at, finished or not.
func entry(t *testing.T, dir, name string, at time.Time, finished bool) string {
	t.Helper()
	e := filepath.Join(dir, name)
	if err := os.Mkdir(e, 0o700); err != nil {
		t.Fatal(err)
	}
	files := []string{fileLock, fileStarted}
	if finished {
		files = append(files, fileStatus)
	}
	for _, f := range files {
		p := filepath.Join(e, f)
		if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(e, at, at); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestPrune(t *testing.T) {
	dir, now := t.TempDir(), time.Now()
	for i, name := range []string{"done-0", "done-1", "done-2", "done-3"} {
		entry(t, dir, name, now.Add(-time.Duration(i)*time.Minute), true)
	}
	entry(t, dir, "done-old", now.Add(-48*time.Hour), true)
	entry(t, dir, "dead-old", now.Add(-48*time.Hour), false)
	entry(t, dir, "dead-new", now.Add(-time.Minute), false)
	running := entry(t, dir, "running-old", now.Add(-48*time.Hour), false)
	lock, err := os.Open(filepath.Join(running, fileLock))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}

	prune(dir, 2, 24*time.Hour, now)

	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, de := range des {
		left = append(left, de.Name())
	}
	// The newest two finished, a dead one not yet old, and a running one
	// however old.
	if want := []string{"dead-new", "done-0", "done-1", "running-old"}; !slices.Equal(left, want) {
		t.Errorf("left %q, want %q", left, want)
	}
}
