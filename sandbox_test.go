package berth_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/transfer"
)

// TestWriteFilesLarge: files too large together for one Update go in as
// a tar stream, with their directories and modes, all of them.
func TestWriteFilesLarge(t *testing.T) {
	ctx := t.Context()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Stop(ctx) })
	big := bytes.Repeat([]byte("0123456789abcdef"), transfer.MaxInlineFiles/16+1)
	err = sb.WriteFiles(ctx,
		berth.File{Path: "deep/dir/big.bin", Data: big},
		berth.File{Path: "tool.sh", Data: []byte("#!/bin/sh\necho tool\n"), Mode: 0o755})
	if err != nil {
		t.Fatal(err)
	}
	got, err := sb.ReadFile(ctx, "deep/dir/big.bin")
	if err != nil || !bytes.Equal(got, big) {
		t.Errorf("big.bin: %d bytes (%v), want %d", len(got), err, len(big))
	}
	res, err := sb.Exec(ctx, []string{"./tool.sh"}, berth.ExecOptions{})
	if err != nil || string(res.Stdout) != "tool\n" {
		t.Errorf("tool.sh: %+v, %v; want it executable, printing tool", res, err)
	}
}

// TestCreateCheckpointPolicy: the policy given to Create reaches the
// sandbox (every write checkpoints it), and a bad one fails at once as
// bad input, starting nothing.
func TestCreateCheckpointPolicy(t *testing.T) {
	ctx := t.Context()
	c := berth.New(dial())
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{Checkpoint: berth.CheckpointPolicy{Every: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Stop(ctx) })
	var seen []string
	for _, name := range []string{"a", "b"} {
		if err := sb.WriteFiles(ctx, berth.File{Path: name, Data: []byte(name)}); err != nil {
			t.Fatal(err)
		}
		st, err := sb.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, st.Checkpoint)
	}
	if seen[0] == "" || seen[1] == "" || seen[0] == seen[1] {
		t.Errorf("checkpoints after each write: %q; want a new one after each", seen)
	}

	id := "sbx-bad-checkpoint"
	_, err = c.Sandboxes().Create(ctx, berth.SandboxOptions{ID: id, Checkpoint: berth.CheckpointPolicy{Idle: time.Millisecond}})
	if berth.KindOf(err) != errdefs.BadInput || strings.Contains(err.Error(), "\n") {
		t.Fatalf("a 1ms idle checkpoint: %v (kind %s); want one line of bad input", err, berth.KindOf(err))
	}
	if _, err := c.Sandboxes().Get(ctx, id); berth.KindOf(err) != errdefs.NotFound {
		t.Errorf("after a refused create, Get(%s): %v; want not found (nothing started)", id, err)
	}
}

// TestCreateHibernated: a sandbox created hibernated from a snapshot
// says so before its first command, which makes it in the snapshot's
// workspace; one from a snapshot that is not there fails at once, as
// one line of NotFound.
func TestCreateHibernated(t *testing.T) {
	ctx := t.Context()
	c := berth.New(dial())
	tmpl, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tmpl.Stop(ctx) })
	if err := tmpl.WriteFiles(ctx, berth.File{Path: "t.txt", Data: []byte("template\n")}); err != nil {
		t.Fatal(err)
	}
	snap, err := tmpl.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes().Create(ctx, berth.SandboxOptions{FromSnapshot: snap, Hibernated: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Stop(ctx) })
	st, err := sb.Status(ctx)
	if err != nil || st.State != berth.StateHibernated || !st.NotYetMade || st.Instance != "" || st.Checkpoint != snap ||
		!st.Options.Hibernated {
		t.Errorf("before its first command: %+v (%v)", st, err)
	}
	res, err := sb.Exec(ctx, []string{"cat", "t.txt"}, berth.ExecOptions{})
	if err != nil || string(res.Stdout) != "template\n" {
		t.Errorf("its first command: %+v, %v", res, err)
	}
	if st, err := sb.Status(ctx); err != nil || st.State != berth.StateRunning || st.NotYetMade || st.Instance == "" {
		t.Errorf("after its first command: %+v (%v)", st, err)
	}

	t0 := time.Now()
	_, err = c.Sandboxes().Create(ctx, berth.SandboxOptions{FromSnapshot: "no-such-template", Hibernated: true})
	if berth.KindOf(err) != errdefs.NotFound || strings.Contains(err.Error(), "\n") || time.Since(t0) > 10*time.Second {
		t.Errorf("from a snapshot not there: %v (kind %s) after %v; want one line of not found, at once", err, berth.KindOf(err), time.Since(t0))
	}
}
