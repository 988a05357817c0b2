package berth_test

import (
	"bytes"
	"testing"

	"github.com/berth-dev/berth"
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
