package remotefake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
)

// Every machine's unprivileged user has a uid and gid of its own on this host,
// from [FirstUID, FirstUID+NumUIDs), unique among the live machines of
// every farm: a hosted machine has a kernel of its own, and so limits per
// user (inotify instances, processes) of its own; containers on one
// kernel share them when their users share a uid.
const (
	FirstUID = 20000
	NumUIDs  = 10000
)

// UserName is the name of a machine's unprivileged user unless
// MachineOptions says otherwise; the user's home is /home/<name>, and the
// user owns it and /workspace.
const UserName = "user"

// checkUserName allows the names useradd would, so that an accounts
// file's line stays well formed.
func checkUserName(name string) error {
	ok := len(name) <= 32 && name != "root"
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '-'):
		default:
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%w: remotefake: bad user name %q", errdefs.ErrBadInput, clip(name))
	}
	return nil
}

// labelUID carries the uid of a container's user.
const labelUID = "berth.remotefake.uid"

// freeUID picks a uid that no container of any farm carries. Another
// farm may pick it at the same time: see holdsUID.
func (f *Farm) freeUID(ctx context.Context) (int, error) {
	list, err := f.docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labelUID)})
	if err != nil {
		return 0, fmt.Errorf("remotefake: list containers: %v", oneLine(err))
	}
	used := map[int]bool{}
	for _, c := range list.Items {
		if u, err := strconv.Atoi(c.Labels[labelUID]); err == nil {
			used[u] = true
		}
	}
	// From a random place, so that a uid just freed is seldom the next
	// one given.
	start := rand.IntN(NumUIDs)
	for i := range NumUIDs {
		u := FirstUID + (start+i)%NumUIDs
		if !used[u] {
			return u, nil
		}
	}
	return 0, errors.New("remotefake: every uid of machines' users is taken")
}

// holdsUID says whether the container id keeps uid: no other carries
// it. Of two that picked it at once, the one that looks later sees the
// other, and so at most one keeps it (maybe neither: both then pick
// again).
func (f *Farm) holdsUID(ctx context.Context, id string, uid int) (bool, error) {
	list, err := f.docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labelUID+"="+strconv.Itoa(uid))})
	if err != nil {
		return false, fmt.Errorf("remotefake: list containers: %v", oneLine(err))
	}
	for _, c := range list.Items {
		if c.ID != id {
			return false, nil
		}
	}
	return true, nil
}

// maxAccounts bounds the image's /etc/passwd and /etc/group.
const maxAccounts = 1 << 20

// setUser makes the machine's user and group, m.user, have uid and gid
// m.uid, in its /etc/passwd and /etc/group (adding them when the image
// has none), and gives it its home (its /workspace is a tmpfs mounted
// with the uid). It runs before any command of the machine's.
func (m *Machine) setUser(ctx context.Context) error {
	id := strconv.Itoa(m.uid)
	name := m.user
	if err := m.editAccounts(ctx, "/etc/passwd", func(f []string) []string {
		if len(f) < 7 {
			return nil
		}
		f[2], f[3] = id, id
		return f
	}, name+":x:"+id+":"+id+":"+name+":"+m.Home()+":/bin/sh"); err != nil {
		return err
	}
	if err := m.editAccounts(ctx, "/etc/group", func(f []string) []string {
		if len(f) < 4 {
			return nil
		}
		f[2] = id
		return f
	}, name+":x:"+id+":"); err != nil {
		return err
	}
	root, err := m.openProc("root", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	home, err := mkdirAll(root, m.Home())
	if err != nil {
		return fmt.Errorf("remotefake: the home of machine %q's user: %w", m.id, err)
	}
	defer unix.Close(home)
	if err := unix.Fchownat(home, "", m.uid, m.uid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("remotefake: the home of machine %q's user: %w", m.id, err)
	}
	return nil
}

// editAccounts rewrites the line of m.user in an accounts file of the
// machine (fields separated by ':') with edit, or adds line when there
// is none.
func (m *Machine) editAccounts(ctx context.Context, name string, edit func([]string) []string, line string) error {
	var old []byte
	rc, err := m.ReadFile(ctx, name)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		old, err = io.ReadAll(io.LimitReader(rc, maxAccounts+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("remotefake: read %s of machine %q: %w", name, m.id, err)
		}
		if len(old) > maxAccounts {
			return fmt.Errorf("remotefake: %s of machine %q is larger than %d bytes", name, m.id, maxAccounts)
		}
	}
	var out bytes.Buffer
	found := false
	for l := range strings.Lines(string(old)) {
		f := strings.Split(strings.TrimSuffix(l, "\n"), ":")
		if f[0] == m.user && !found {
			if f = edit(f); f == nil {
				return fmt.Errorf("remotefake: %s of machine %q: a bad line of %s", name, m.id, m.user)
			}
			found = true
			l = strings.Join(f, ":") + "\n"
		}
		if !strings.HasSuffix(l, "\n") {
			l += "\n"
		}
		out.WriteString(l)
	}
	if !found {
		out.WriteString(line + "\n")
	}
	return m.WriteFile(ctx, name, &out, 0o644)
}
