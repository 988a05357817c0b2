package remotefake

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
)

// fsState describes, in the machine, what TestSaveRestoreFilesystem
// made: each path's mode, owner (U for the machine's user), type, size
// and link, and a file's contents.
const fsState = `cd / && for p in workspace workspace/exe workspace/ro workspace/empty workspace/link workspace/dangling workspace/d workspace/d/deep workspace/hard tmp/t etc/berth.conf home/user/.profile usr/bin/yes; do
  if [ -e "$p" ] || [ -L "$p" ]; then stat -c '%n %a %u:%g %F %s %N' "$p" | sed "s/ $1:/ U:/; s/:$1 / :U /; s/U:$1 /U:U /"; else echo "$p absent"; fi
done; cat workspace/exe workspace/d/deep etc/berth.conf; [ workspace/hard -ef workspace/exe ] && echo hard-linked; id -u user`

// TestSaveRestoreFilesystem: what a machine holds beyond its image, in
// the workspace, /tmp and its own layer, is saved and restored into a
// new machine with its modes, links, empty files and owners (the user's
// files the new machine's user's), a file removed from the image removed
// again.
func TestSaveRestoreFilesystem(t *testing.T) {
	t.Parallel()
	src := newMachine(t, nil)
	u := strconv.Itoa(src.UID())
	setup := `set -e; cd /workspace
printf '#!/bin/sh\necho hi\n' > exe; chmod 0751 exe
echo ro > ro; chmod 0400 ro
: > empty
ln -s exe link; ln -s /nowhere dangling
mkdir -p d; chmod 0705 d; echo deep > d/deep
ln exe hard
chown -R ` + u + `:` + u + ` /workspace
echo t > /tmp/t
echo conf > /etc/berth.conf
rm /usr/bin/yes`
	if _, stderr, code := runCmd(t, src, Command{Argv: []string{"sh", "-c", setup}}); code != 0 {
		t.Fatalf("setting up: %d: %s", code, stderr)
	}
	want, _, _ := runCmd(t, src, Command{Argv: []string{"sh", "-c", fsState, "sh", u}})
	if !strings.Contains(want, "hard-linked") || !strings.Contains(want, "usr/bin/yes absent") {
		t.Fatalf("the source machine: %s", want)
	}
	var saved bytes.Buffer
	n, err := src.SaveFilesystem(t.Context(), &saved)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(saved.Len()) || n == 0 {
		t.Errorf("SaveFilesystem says %d bytes, wrote %d", n, saved.Len())
	}
	dst := newMachine(t, nil)
	if err := dst.RestoreFilesystem(t.Context(), bytes.NewReader(saved.Bytes()), src.UID()); err != nil {
		t.Fatal(err)
	}
	got, _, _ := runCmd(t, dst, Command{Argv: []string{"sh", "-c", fsState, "sh", strconv.Itoa(dst.UID())}})
	// The last line is the user's uid, each machine's own.
	trim := func(s string) string { return s[:strings.LastIndex(strings.TrimSuffix(s, "\n"), "\n")] }
	if trim(got) != trim(want) {
		t.Errorf("restored:\n%s\nwant:\n%s", got, want)
	}
	if !strings.HasSuffix(got, "\n"+strconv.Itoa(dst.UID())+"\n") {
		t.Errorf("the restored machine's user: %q, want uid %d", got, dst.UID())
	}

	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := src.SaveFilesystem(ctx, &bytes.Buffer{}); err == nil {
			t.Error("a save with its context canceled succeeded")
		}
	})
	t.Run("bad stream", func(t *testing.T) {
		if err := dst.RestoreFilesystem(t.Context(), strings.NewReader("not a tar stream"), src.UID()); err == nil {
			t.Error("restoring garbage succeeded")
		}
	})
	t.Run("destroyed", func(t *testing.T) {
		m := newMachine(t, nil)
		if err := m.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := m.SaveFilesystem(t.Context(), &bytes.Buffer{}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("saving a destroyed machine: %v, want ErrNotFound", err)
		}
	})
}
