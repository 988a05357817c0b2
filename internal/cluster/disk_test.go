package cluster_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth"
)

// createAll creates sandboxes of the given ids at once, and says on
// which host each landed.
func createAll(ctx context.Context, t *testing.T, tc client.Client, bc *berth.Client, ids ...string) (map[string]*berth.Sandbox, map[string]string) {
	t.Helper()
	sbxs := make([]*berth.Sandbox, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			sbxs[i], errs[i] = bc.Sandboxes().Create(ctx, berth.SandboxOptions{ID: id, IdleTimeout: berth.Never, HibernateAfter: berth.Never})
		})
	}
	wg.Wait()
	byID, hosts := map[string]*berth.Sandbox{}, map[string]string{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("create %s: %v", id, errs[i])
		}
		byID[id], hosts[id] = sbxs[i], hostOf(ctx, t, tc, id)
	}
	return byID, hosts
}

// TestDiskFull: each host's data directory is a disk of its own. Host
// 1's is filled: sandboxes created then (at once) all land on the
// other two, evenly; once it is freed, the next ones land on it, the
// least loaded. A sandbox on a host whose disk fills gets a clean
// failure for a write the disk cannot take, and answers on; its
// checkpoint is either whole or refused, never corrupt.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	c := up(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	tc, bc := c.dial(ctx, t)

	if err := c.run(t, "fill-disk", "1"); err != nil {
		t.Fatal(err)
	}
	_, hosts := createAll(ctx, t, tc, bc, "full-0", "full-1", "full-2", "full-3")
	count := map[string]int{}
	for _, h := range hosts {
		count[h]++
	}
	t.Logf("host 1's disk full: %v", hosts)
	if count["berth@h1"] != 0 || count["berth@h2"] != 2 || count["berth@h3"] != 2 {
		t.Errorf("4 sandboxes with host 1's disk full: %v; want none on h1, 2 on h2 and on h3", count)
	}

	if err := c.run(t, "free-disk", "1"); err != nil {
		t.Fatal(err)
	}
	sbxs, hosts := createAll(ctx, t, tc, bc, "freed-0", "freed-1")
	t.Logf("host 1's disk freed: %v", hosts)
	for id, h := range hosts {
		if h != "berth@h1" {
			t.Errorf("%s, made once host 1's disk was freed, is on %s; want h1, the least loaded", id, h)
		}
	}

	// The disk fills under a sandbox: the write it cannot take fails,
	// the sandbox answers on, and its checkpoint is not corrupt.
	s := sbxs["freed-0"]
	if err := s.WriteFiles(ctx, berth.File{Path: "kept", Data: []byte("kept\n")}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(t, "fill-disk", "1"); err != nil {
		t.Fatal(err)
	}
	argv, opts := sh("head -c 64M /dev/urandom > big && sync big")
	res, err := s.Exec(ctx, argv, opts)
	if err != nil {
		t.Fatalf("a write past the host's disk: %v; want the command to fail, not the sandbox", err)
	}
	t.Logf("a write past the host's disk: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	if res.OK() {
		t.Errorf("a write of 64 MiB on a full host disk succeeded")
	}
	if got := execOK(ctx, t, s, "cat kept"); got != "kept\n" {
		t.Errorf("the sandbox after the failed write: %q", got)
	}
	if err := execCleanup(ctx, s); err != nil {
		t.Logf("remove the partial file: %v", err)
	}
	err = s.Hibernate(ctx)
	t.Logf("its checkpoint with the host's disk full: %v", err)
	if err != nil {
		if k := berth.KindOf(err); k == berth.Internal {
			t.Errorf("a checkpoint refused with an untyped error: %v", err)
		}
	} else if got := execOK(ctx, t, s, "cat kept"); got != "kept\n" { // woken from it
		t.Errorf("woken from the checkpoint taken with the disk full: %q", got)
	}
	if err := c.run(t, "free-disk", "1"); err != nil {
		t.Fatal(err)
	}
}

// execCleanup removes what a failed write left.
func execCleanup(ctx context.Context, s *berth.Sandbox) error {
	argv, opts := sh("rm -f big")
	_, err := s.Exec(ctx, argv, opts)
	return err
}
