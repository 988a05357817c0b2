package remotefake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/errdefs"
)

// MaxFileSize bounds a file that WriteFile writes.
const MaxFileSize = 1 << 30

// Paths are resolved in the machine's root, through /proc/<pid>/root of
// its first process, with openat2's RESOLVE_IN_ROOT: a link in the
// machine that names "/" or "../.." stays in the machine.
const inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// WriteFile writes r to path in the machine, as root, with mode, making
// its parent directories (mode 0755). The file appears whole or not at
// all; one larger than MaxFileSize is refused.
func (m *Machine) WriteFile(ctx context.Context, name string, r io.Reader, mode fs.FileMode) (err error) {
	clean, err := machinePath(name)
	if err != nil {
		return err
	}
	if clean == "/" {
		return fmt.Errorf("%w: remotefake: write %s: a directory", errdefs.ErrBadInput, clip(name))
	}
	root, err := m.openProc("root", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, err := mkdirAll(root, path.Dir(clean))
	if err != nil {
		return fmt.Errorf("remotefake: write %s: %w", clip(name), err)
	}
	defer unix.Close(dir)
	tmp := ".remotefake-" + randomHex(8)
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("remotefake: write %s: %w", clip(name), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer func() {
		if f != nil {
			f.Close()
		}
		if err != nil {
			unix.Unlinkat(dir, tmp, 0)
		}
	}()
	n, err := io.Copy(f, &ctxReader{ctx: ctx, r: io.LimitReader(r, MaxFileSize+1)})
	if err != nil {
		return fmt.Errorf("remotefake: write %s: %w", clip(name), err)
	}
	if n > MaxFileSize {
		return fmt.Errorf("%w: remotefake: write %s: larger than %d bytes", errdefs.ErrBadInput, clip(name), MaxFileSize)
	}
	if err := f.Chmod(mode.Perm() | mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return fmt.Errorf("remotefake: write %s: %w", clip(name), err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return fmt.Errorf("remotefake: write %s: %w", clip(name), err)
	}
	if err := unix.Renameat(dir, tmp, dir, path.Base(clean)); err != nil {
		return fmt.Errorf("remotefake: write %s: %w", clip(name), err)
	}
	return nil
}

// ReadFile opens the regular file path in the machine for reading. A
// missing one is an error wrapping fs.ErrNotExist.
func (m *Machine) ReadFile(ctx context.Context, name string) (io.ReadCloser, error) {
	clean, err := machinePath(name)
	if err != nil {
		return nil, err
	}
	root, err := m.openProc("root", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	// O_NONBLOCK: a FIFO is refused below, not waited on.
	fd, err := openInRoot(root, strings.TrimPrefix(clean, "/"), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: inRoot,
	})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("remotefake: read %s: %w", clip(name), fs.ErrNotExist)
		}
		return nil, fmt.Errorf("remotefake: read %s: %w", clip(name), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("remotefake: read %s: %w", clip(name), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: remotefake: read %s: not a regular file", errdefs.ErrBadInput, clip(name))
	}
	return os.NewFile(uintptr(fd), clean), nil
}

// mkdirAll opens directory dir of root, making what is missing of it.
func mkdirAll(root int, dir string) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	sofar := ""
	for c := range strings.SplitSeq(strings.Trim(dir, "/"), "/") {
		if c == "" {
			continue
		}
		sofar = path.Join(sofar, c)
		next, err := openInRoot(root, sofar, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: inRoot})
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(fd)
				return -1, err
			}
			next, err = openInRoot(root, sofar, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: inRoot})
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// openInRoot is openat2, tried again when the kernel says EAGAIN: a path
// with ".." in it while something is renamed or mounted anywhere.
func openInRoot(root int, name string, how *unix.OpenHow) (int, error) {
	for i := 0; ; i++ {
		fd, err := unix.Openat2(root, name, how)
		if err != unix.EAGAIN || i == 100 {
			return fd, err
		}
	}
}

// machinePath checks a path in the machine and cleans it.
func machinePath(name string) (string, error) {
	if !strings.HasPrefix(name, "/") || len(name) > 4096 || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: remotefake: %q is not an absolute path", errdefs.ErrBadInput, clip(name))
	}
	return path.Clean(name), nil
}

// ctxReader ends a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}
