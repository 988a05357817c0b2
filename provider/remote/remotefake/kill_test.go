package remotefake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"
)

// TestCreateWithUser proves a machine's user is the one its options name,
// with its own home and uid, while "user" is unknown to it.
func TestCreateWithUser(t *testing.T) {
	t.Parallel()
	m, err := farm.CreateWith(t.Context(), "with-"+randomHex(3), MachineOptions{Env: map[string]string{"BASE": "b"}, UserName: "daytona"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Destroy(context.Background()) })
	if m.UserName() != "daytona" || m.Home() != "/home/daytona" {
		t.Fatalf("user %q, home %q", m.UserName(), m.Home())
	}
	out, _, code := runCmd(t, m, Command{Argv: []string{"sh", "-c", `echo $(id -un) $(id -gn) $(id -u) $HOME $USER $BASE $(stat -c %u /home/daytona) $(grep -c '^daytona:' /etc/passwd)`}, User: "daytona"})
	u := strconv.Itoa(m.UID())
	if want := fmt.Sprintf("daytona daytona %s /home/daytona daytona b %s 1\n", u, u); out != want || code != 0 {
		t.Fatalf("stdout %q, code %d; want %q", out, code, want)
	}
	if _, err := m.Start(t.Context(), Command{Argv: []string{"true"}, User: "user"}); !errors.Is(err, errdefs.ErrBadInput) {
		t.Fatalf("Start as user: %v, want ErrBadInput", err)
	}
	for _, bad := range []string{"root", "a:b", "Bad", "x\ny", strings.Repeat("a", 40)} {
		if _, err := farm.CreateWith(t.Context(), "bad-"+randomHex(3), MachineOptions{UserName: bad}); !errors.Is(err, errdefs.ErrBadInput) {
			t.Errorf("CreateWith user %q: %v, want ErrBadInput", bad, err)
		}
	}
}

// TestKillAll proves KillAll ends every process, orphans and those of
// commands still running among them, and keeps the machine and its
// files: a command runs after it.
func TestKillAll(t *testing.T) {
	t.Parallel()
	m := newMachine(t, nil)
	if err := m.WriteFile(t.Context(), "/tmp/kept", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := m.Start(t.Context(), Command{Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000 & echo started; wait"}, User: "user"})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := io.ReadFull(p.Stdout(), buf); err != nil {
		t.Fatal(err)
	}
	before, err := m.HostPIDs()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := m.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatal("the command outlived KillAll")
	}
	after, err := m.HostPIDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(before) < 5 || len(after) != 2 {
		t.Fatalf("processes before %v, after %v: want the two that keep the machine up after", before, after)
	}
	out, _, code := runCmd(t, m, Command{Argv: []string{"cat", "/tmp/kept"}})
	if out != "kept" || code != 0 {
		t.Fatalf("after KillAll: %q, code %d", out, code)
	}
}
