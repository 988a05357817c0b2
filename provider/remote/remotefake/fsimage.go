package remotefake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/errdefs"
)

// A machine's filesystem is saved as a hosted service's filesystem
// snapshot is: what it holds beyond its image, as one layer. That is
// what Docker says changed in the container's own layer, and the whole
// of /workspace and /tmp, file systems of their own (a hosted machine's
// disk holds them). A path removed from the image is an OCI whiteout,
// an empty entry named .wh.NAME beside it. Both ends run in the
// machines, as root, with their own python3: the host never walks a
// tree a sandbox can write.

// MaxFilesystemSize bounds a saved filesystem: the tmpfs mounts' bounds
// and room for what changed besides.
const MaxFilesystemSize = 2*WorkspaceSize + 4<<30

// mounted are the machine's file systems of their own, saved whole.
var mounted = []string{"/workspace", "/tmp"}

// notSaved are the paths Docker gives every container, and the file
// systems of the kernel's: never a machine's own.
var notSaved = []string{"/proc", "/sys", "/dev", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/.dockerenv",
	"/sbin/docker-init", "/usr/sbin/docker-init"}

// saveScript writes a tar stream of the entries its input names, each
// "K/path" and a NUL: K is P for the entry alone, R for it and all
// under it, D for a whiteout. Sockets are left out, as tar does.
const saveScript = `
import os, sys, tarfile
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.GNU_FORMAT)
for e in sys.stdin.buffer.read().split(b"\0"):
    if not e:
        continue
    kind, p = chr(e[0]), os.fsdecode(e[1:])
    if kind == "D":
        out.addfile(tarfile.TarInfo(os.path.join(os.path.dirname(p), ".wh." + os.path.basename(p)).lstrip("/")))
        continue
    try:
        out.add(p, recursive=(kind == "R"))
    except FileNotFoundError:
        pass
out.close()
`

// restoreScript unpacks a stream of saveScript's at /, what it replaces
// removed first (never written through: a link there is replaced), the
// owner argv[1] becoming argv[2], and applies its whiteouts.
const restoreScript = `
import os, shutil, sys, tarfile
frm, to = int(sys.argv[1]), int(sys.argv[2])
t = tarfile.open(fileobj=sys.stdin.buffer, mode="r|")
def clear(p, keep_dir):
    if os.path.isdir(p) and not os.path.islink(p):
        if not keep_dir:
            shutil.rmtree(p)
    elif os.path.lexists(p):
        os.unlink(p)
for ti in t:
    name = ti.name.lstrip("/")
    base = os.path.basename(name)
    if base.startswith(".wh."):
        clear("/" + os.path.join(os.path.dirname(name), base[4:]), False)
        continue
    target = "/" + name
    if os.path.normpath(target) == "/":
        continue
    if not ti.isdir() and os.path.ismount(target):
        continue  # the engine's own (a bind mount), in every machine
    clear(target, ti.isdir())
    if ti.uid == frm:
        ti.uid = to
    if ti.gid == frm:
        ti.gid = to
    ti.uname = ti.gname = ""
    t.extract(ti, "/", set_attrs=True, numeric_owner=True)
`

// SaveFilesystem writes m's filesystem beyond its image to w, as a tar
// stream of at most MaxFilesystemSize bytes, and returns its size. The
// owners are kept as numbers: give m.UID() to RestoreFilesystem.
func (m *Machine) SaveFilesystem(ctx context.Context, w io.Writer) (int64, error) {
	if err := m.check(false); err != nil {
		return 0, err
	}
	diff, err := m.farm.docker.ContainerDiff(ctx, m.container, client.ContainerDiffOptions{})
	if err != nil {
		return 0, fmt.Errorf("remotefake: the changes of machine %q: %v", m.id, oneLine(err))
	}
	var list bytes.Buffer
	for _, p := range mounted {
		list.WriteString("R" + p + "\x00")
	}
	for _, c := range diff.Changes {
		p := path.Clean(c.Path)
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || p == "/" || under(p, mounted) || under(p, notSaved) {
			continue
		}
		kind := "P"
		if c.Kind == container.ChangeDelete {
			kind = "D"
		}
		list.WriteString(kind + p + "\x00")
	}
	n, err := m.runScript(ctx, saveScript, nil, &list, w, MaxFilesystemSize)
	if err != nil {
		return n, fmt.Errorf("remotefake: save the filesystem of machine %q: %w", m.id, err)
	}
	return n, nil
}

// RestoreFilesystem unpacks into m a stream of SaveFilesystem's, saved
// from a machine whose user had the uid from: its files are m's user's.
// Then m's user is set again, the saved accounts files naming from.
func (m *Machine) RestoreFilesystem(ctx context.Context, r io.Reader, from int) error {
	if err := m.check(false); err != nil {
		return err
	}
	args := []string{strconv.Itoa(from), strconv.Itoa(m.uid)}
	if _, err := m.runScript(ctx, restoreScript, args, r, io.Discard, 0); err != nil {
		return fmt.Errorf("remotefake: restore the filesystem of machine %q: %w", m.id, err)
	}
	return m.setUser(ctx)
}

// under says whether p is one of roots or below one.
func under(p string, roots []string) bool {
	return slices.ContainsFunc(roots, func(r string) bool { return p == r || strings.HasPrefix(p, r+"/") })
}

// maxScriptStderr bounds what is quoted of a script's stderr, and
// killWait how long killing it may take.
const (
	maxScriptStderr = 4 << 10
	killWait        = 10 * time.Second
)

// runScript runs python3 script in m as root with args, in from it,
// its output to out (at most max bytes unless max is 0), and returns
// how many bytes it wrote there. ctx ending kills it.
func (m *Machine) runScript(ctx context.Context, script string, args []string, in io.Reader, out io.Writer, max int64) (int64, error) {
	p, err := m.Start(ctx, Command{Argv: append([]string{"python3", "-c", script}, args...), Stdin: true})
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), killWait)
		defer cancel()
		_ = p.Signal(sctx, syscall.SIGKILL)
	})
	defer stop()
	var stderr bytes.Buffer
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		_, _ = io.Copy(&stderr, io.LimitReader(p.Stderr(), maxScriptStderr))
		_, _ = io.Copy(io.Discard, p.Stderr())
	}()
	inDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(p.Stdin(), &ctxReader{ctx: ctx, r: in})
		if cerr := p.Stdin().Close(); err == nil {
			err = cerr
		}
		inDone <- err
	}()
	src := p.Stdout()
	if max > 0 {
		src = io.LimitReader(src, max+1)
	}
	n, copyErr := io.Copy(out, src)
	if max > 0 && n > max {
		_ = p.Signal(context.WithoutCancel(ctx), syscall.SIGKILL)
		copyErr = fmt.Errorf("%w: more than %d bytes", errdefs.ErrBadInput, max)
	}
	if copyErr != nil {
		_ = p.Signal(context.WithoutCancel(ctx), syscall.SIGKILL)
	}
	_, _ = io.Copy(io.Discard, p.Stdout())
	code, err := p.Wait()
	<-errDone
	inErr := <-inDone
	switch {
	case ctx.Err() != nil:
		return n, fmt.Errorf("%w: %v", errdefs.ErrCanceled, ctx.Err())
	case copyErr != nil:
		return n, copyErr
	case err != nil:
		return n, err
	case code != 0:
		// A traceback's last line says what went wrong.
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		return n, fmt.Errorf("exit code %d: %s", code, oneLine(errors.New(lines[len(lines)-1])))
	case inErr != nil:
		return n, inErr
	}
	return n, nil
}
