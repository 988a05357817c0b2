package cluster_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/snapshot"
)

// The workers' blob store settings in the fault tests: a retry bound
// past the 30 s outage, and a request timeout short enough that a hung
// store is given up on soon.
const (
	outage       = 30 * time.Second
	storeRetry   = 40 * time.Second
	storeRequest = 5 * time.Second
)

// setting is the value of one of the cluster's settings.
func (c *cluster) setting(name string) string {
	for _, kv := range c.env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// snapshots opens the snapshot store the workers share, through S3.
func (c *cluster) snapshots(ctx context.Context, t *testing.T) *snapshot.Store {
	t.Helper()
	b := blob.PrefixedBucket(c.bucket(ctx, t), hostworker.SnapshotPrefix)
	t.Cleanup(func() { b.Close() })
	return snapshot.New(b)
}

// wholeStore checks that every snapshot in the store restores: each
// manifest is whole and each chunk it names is there, of its hash.
func wholeStore(ctx context.Context, t *testing.T, store *snapshot.Store) []snapshot.Info {
	t.Helper()
	infos, err := store.List(ctx)
	if err != nil {
		t.Fatalf("list the store: %v", err)
	}
	for _, info := range infos {
		rc, err := store.Open(ctx, info.ID, nil)
		if err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
		if err != nil {
			t.Errorf("snapshot %s does not restore: %v", info.ID, err)
		}
	}
	return infos
}

// TestStoreOutage: the S3 store fails under checkpoints. A user
// snapshot A is taken, files change, the store is killed, and a
// hibernation (a checkpoint B) is asked for: it waits out the 30 s
// outage, retried, while another sandbox serves commands, and completes
// once the store is back. Every snapshot in the store then restores
// whole; the sandbox wakes from B, and a sandbox made from A has A's
// files alone. Then the store hangs (SIGSTOP) for longer than the
// workers' retry bound: the next hibernation fails with
// StoreUnavailable, one line, within the bound, and leaves the sandbox
// running with B its checkpoint. Its host is then killed: the sandbox
// is recovered from B, and the write since is named as lost.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	c := up(t, "CLUSTER_STORE_RETRY="+storeRetry.String(), "CLUSTER_STORE_REQUEST_TIMEOUT="+storeRequest.String())
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	tc, bc := c.dial(ctx, t)
	store := c.snapshots(ctx, t)

	opts := func(id string) berth.SandboxOptions {
		// A short host timeout: the loss at the end is noticed sooner.
		return berth.SandboxOptions{ID: id, IdleTimeout: berth.Never, HibernateAfter: berth.Never, HostTimeout: 20 * time.Second}
	}
	s, err := bc.Sandboxes().Create(ctx, opts("outage"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := bc.Sandboxes().Create(ctx, opts("outage-other"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFiles(ctx, berth.File{Path: "a", Data: []byte("A")}); err != nil {
		t.Fatal(err)
	}
	snapA, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFiles(ctx, berth.File{Path: "b", Data: []byte("B")}); err != nil {
		t.Fatal(err)
	}

	// The store killed, a checkpoint asked for: it waits for the store.
	if err := c.run(t, "stop-s3"); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	hibernated := make(chan error, 1)
	go func() { hibernated <- s.Hibernate(ctx) }()
	back := time.After(outage)
	for waiting := true; waiting; {
		select {
		case err := <-hibernated:
			t.Fatalf("the hibernation returned while the store was down, %v after it went: %v", time.Since(killed).Round(time.Millisecond), err)
		case <-back:
			waiting = false
		case <-time.After(2 * time.Second):
			// Sandboxes not waiting on the store serve meanwhile.
			if got := execOK(ctx, t, other, "echo up"); got != "up\n" {
				t.Errorf("another sandbox during the outage: %q", got)
			}
		}
	}
	if err := c.run(t, "start-s3"); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := <-hibernated; err != nil {
		t.Fatalf("the hibernation across a %v outage: %v; want it retried until the store came back", outage, err)
	}
	t.Logf("checkpoint B completed %v after the store came back (%v after it went)",
		time.Since(restarted).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	st, err := s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkpointB := st.Checkpoint
	if st.State != berth.StateHibernated || checkpointB == "" || checkpointB == snapA {
		t.Fatalf("after the hibernation: state %s, checkpoint %q (snapshot A %s); want hibernated on a new checkpoint", st.State, checkpointB, snapA)
	}
	infos := wholeStore(ctx, t, store)
	t.Logf("%d snapshots in the store, all whole", len(infos))

	// B restores: the sandbox wakes from it. A restores: a sandbox made
	// from it has A's file alone.
	if got := execOK(ctx, t, s, "cat a b"); got != "AB" {
		t.Errorf("woken from checkpoint B: %q; want AB", got)
	}
	fromA, err := bc.Sandboxes().Create(ctx, berth.SandboxOptions{ID: "outage-from-a", IdleTimeout: berth.Never, HibernateAfter: berth.Never, FromSnapshot: snapA})
	if err != nil {
		t.Fatal(err)
	}
	if got := execOK(ctx, t, fromA, "cat a; ls"); got != "Aa\n" {
		t.Errorf("made from snapshot A: %q; want a alone", got)
	}

	// The store hung past the retry bound: the checkpoint fails, typed,
	// and B stays the checkpoint.
	if err := s.WriteFiles(ctx, berth.File{Path: "c", Data: []byte("C")}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(t, "freeze-s3"); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	err = s.Hibernate(ctx)
	took := time.Since(frozen)
	if err := c.run(t, "thaw-s3"); err != nil {
		t.Fatal(err)
	}
	t.Logf("the hibernation with the store hung failed after %v: %v", took.Round(time.Millisecond), err)
	if berth.KindOf(err) != berth.StoreUnavailable {
		t.Fatalf("a checkpoint with the store hung past the retry bound: %v; want %s", err, berth.StoreUnavailable)
	}
	if line := berth.OneLine(err); strings.Contains(line, "\n") || !strings.Contains(line, "did not answer") {
		t.Errorf("the error reads %q; want one line saying the store did not answer", line)
	}
	if took < storeRetry {
		t.Errorf("it failed after %v, before the retry bound %v", took, storeRetry)
	}
	st, err = s.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != berth.StateRunning || st.Checkpoint != checkpointB {
		t.Errorf("after the failed checkpoint: state %s, checkpoint %q; want running, on B (%s)", st.State, st.Checkpoint, checkpointB)
	}
	if got := execOK(ctx, t, s, "cat c"); got != "C" {
		t.Errorf("the sandbox after its failed checkpoint: %q", got)
	}
	wholeStore(ctx, t, store)

	// Its host lost: recovered from B, c named as lost.
	host := hostOf(ctx, t, tc, s.ID())
	if err := c.run(t, "kill-host", strings.TrimPrefix(host, "berth@h")); err != nil {
		t.Fatal(err)
	}
	argv, eo := sh("cat a b")
	_, err = s.Exec(ctx, argv, eo)
	if berth.KindOf(err) != berth.SandboxLost || !strings.Contains(err.Error(), checkpointB) || !strings.Contains(err.Error(), "write c") {
		t.Fatalf("the first command after the host's loss: %v; want SandboxLost, naming checkpoint %s and the write of c", err, checkpointB)
	}
	if got := execOK(ctx, t, s, "cat a b; ls"); got != "ABa\nb\n" {
		t.Errorf("recovered from B: %q; want a and b, not c", got)
	}
}
