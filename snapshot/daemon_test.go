package snapshot

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berth-dev/berth/sandboxd"
)

// serveDaemon starts berth's in-sandbox daemon on a new workspace and
// returns a client for it with the workspace's directory.
func serveDaemon(t *testing.T) (*sandboxd.Client, string) {
	t.Helper()
	ws := t.TempDir()
	srv, err := sandboxd.New(sandboxd.Config{Workspace: ws, UID: os.Geteuid(), GID: os.Getegid()})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	c := sandboxd.NewClient(sandboxd.UnixDialer(sock))
	t.Cleanup(func() {
		c.Close()
		srv.Shutdown(context.WithoutCancel(t.Context()))
	})
	return c, ws
}

// daemonSource reads a workspace through the daemon, as a sandbox's
// provider does, counting the bytes of tar it sends.
type daemonSource struct {
	c    *sandboxd.Client
	sent atomic.Int64
}

func (d *daemonSource) Export(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	var rc io.ReadCloser
	var err error
	if since.IsZero() {
		rc, err = d.c.Export(ctx)
	} else {
		rc, err = d.c.ExportChanged(ctx, since)
	}
	if err != nil {
		return nil, err
	}
	return &countingReader{rc, &d.sent}, nil
}

func (d *daemonSource) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return d.c.ReadFile(ctx, path)
}

// TestDaemonRoundTrip saves a workspace from the real daemon's export,
// saves it again with only what changed, and unpacks the second snapshot
// with another daemon's Import: the workspaces then export the same.
func TestDaemonRoundTrip(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	to, _ := serveDaemon(t)
	trickyTree(t, wsFrom)
	s, _ := newStore(t, WithClockMargin(time.Nanosecond)) // the files were written before the first save

	opts := SaveOptions{Source: "daemon/from"}
	src := &daemonSource{c: from}
	first := mustSave(t, s, src, opts)
	opts.Parent = first.ID
	src = &daemonSource{c: from}
	second := mustSave(t, s, src, opts)
	if second.Stored != 0 || src.sent.Load() > 64<<10 || second.Size != first.Size {
		t.Errorf("second save: %d bytes stored, %d bytes of tar sent, size %d (first %d); want none stored, headers only", second.Stored, src.sent.Load(), second.Size, first.Size)
	}

	rc, err := s.Open(t.Context(), second.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := to.Import(t.Context(), rc); err != nil {
		t.Fatalf("Import: %v", err)
	}

	want, got := daemonTar(t, from), daemonTar(t, to)
	// Import does not set the times of symbolic links.
	for _, entries := range [][]tarEntry{want, got} {
		for i := range entries {
			if entries[i].Type == '2' {
				entries[i].MTime = 0
			}
		}
	}
	diffEntries(t, want, got)
}

func daemonTar(t *testing.T, c *sandboxd.Client) []tarEntry {
	t.Helper()
	rc, err := c.Export(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return readTar(t, rc)
}

// TestSaveAfterRestore: a workspace restored from a snapshot, then
// changed a little, is saved with the restore's end as RestoredAt: only
// what changed since moves, and the result is the changed workspace.
func TestSaveAfterRestore(t *testing.T) {
	from, wsFrom := serveDaemon(t)
	to, wsTo := serveDaemon(t)
	trickyTree(t, wsFrom)
	s, _ := newStore(t)
	first := mustSave(t, s, &daemonSource{c: from}, SaveOptions{Source: "daemon/from"})

	rc, err := s.Open(t.Context(), first.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := to.Import(t.Context(), rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	restoredAt := time.Now()
	time.Sleep(10 * time.Millisecond) // past the filesystem's timestamp granularity
	if err := os.WriteFile(filepath.Join(wsTo, "after-restore.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}

	src := &daemonSource{c: to}
	second := mustSave(t, s, src, SaveOptions{Source: "daemon/to", Parent: first.ID, RestoredAt: restoredAt})
	if src.sent.Load() > 64<<10 || second.Size != first.Size+3 {
		t.Errorf("save after restore: %d bytes of tar sent, size %d (restored %d); want headers and the new file only", src.sent.Load(), second.Size, first.Size)
	}
	rc, err = s.Open(t.Context(), second.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	third, _ := serveDaemon(t)
	if err := third.Import(t.Context(), rc); err != nil {
		t.Fatal(err)
	}
	want, got := daemonTar(t, to), daemonTar(t, third)
	for _, entries := range [][]tarEntry{want, got} {
		for i := range entries {
			if entries[i].Type == '2' {
				entries[i].MTime = 0
			}
		}
	}
	diffEntries(t, want, got)
}
