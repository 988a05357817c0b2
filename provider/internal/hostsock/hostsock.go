// Package hostsock connects the host to a sandbox daemon's unix socket
// without following anything a sandbox can write.
//
// A daemon's socket lies in a directory that the sandbox may be able to
// write (Docker binds it into the container, runsc's gofer creates what
// the sandbox makes there): whatever is at the socket's name could be a
// link to another sandbox's socket, and connect(2) follows links. So
// the socket is opened by descriptor, O_PATH and O_NOFOLLOW, from a
// descriptor of its directory opened the same way; the descriptor must
// be a socket owned by the uid the provider expects; and the host
// connects through /proc/self/fd/N, which names that inode whatever
// happens to the name meanwhile. The same path also fits in a socket
// address however deep the state directory is.
package hostsock

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"
)

// Dial connects to the unix socket at path, which must be a socket
// owned by uid and not reached through a link in its last two
// components (the socket and its directory). Anything else there is
// the sandbox's doing: the error wraps errdefs.ErrSandboxLost, since the
// daemon can no longer be reached safely.
func Dial(ctx context.Context, path string, uid int) (net.Conn, error) {
	fd, err := open(path, uid)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var d net.Dialer
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// Dialer returns a function that dials path with Dial.
func Dialer(path string, uid int) func(ctx context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) { return Dial(ctx, path, uid) }
}

// open opens the socket at path as Dial checks it, and returns an O_PATH
// descriptor of it, which the caller closes.
func open(path string, uid int) (int, error) {
	dir, name := filepath.Split(path)
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return -1, fmt.Errorf("socket path %q has no name", path)
	}
	dfd, err := unix.Open(filepath.Clean(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("open %s: %w", dir, err)}
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		// Not there yet (a daemon starting) or gone: a failure to
		// connect, as connect(2) would report it.
		return -1, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("open %s: %w", path, err)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != uid {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: %s is not the daemon's socket (a %s owned by uid %d, want a socket of uid %d): the sandbox replaced it", errdefs.ErrSandboxLost, path, kind(st.Mode), st.Uid, uid)
	}
	return fd, nil
}

func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFLNK:
		return "symbolic link"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFIFO:
		return "fifo"
	}
	return "special file"
}
