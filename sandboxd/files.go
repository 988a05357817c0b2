package sandboxd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/provider"
)

// maxDirEntries bounds a directory listing; a bigger directory is bad
// input rather than an unbounded answer.
const maxDirEntries = 100_000

// asUser runs fn confined: on an OS thread of its own whose root
// directory is the workspace (where the daemon may chroot: see
// canChroot) and whose every id is the sandbox user's, with no
// capabilities. What fn creates the user owns; it may touch only what
// the user may; and whatever a path or a link says, even one a command
// swaps while fn walks it, resolution cannot leave the workspace, since
// the thread's root is the workspace. Every operation on workspace
// contents runs here: reads, writes, listings, removals, exports and
// imports, on every provider, so that none depends on how a kernel
// treats O_NOFOLLOW (gVisor follows a link that open is told not to
// follow when it is also told to open a directory, which os.Root relies
// on) or on rights the daemon holds and the user does not.
//
// The work runs in a goroutine of its own, whose thread is never
// unlocked: it ends with the goroutine, and nothing else ever runs on it
// as the sandbox user or in its root. (The caller's goroutine may live
// on: an HTTP connection's serves request after request.) A daemon that
// is the sandbox user already has nothing to drop, and runs fn as it is.
func (s *Server) asUser(fn func() error) error {
	if !s.switchUser {
		return fn()
	}
	return onOwnThread(func() error { return s.confined(fn) })
}

// onOwnThread runs fn in a goroutine of its own, locked to an OS thread
// that is not the daemon's main thread, and never unlocked: the thread
// ends with the goroutine, ids, root and all. The main thread would not
// end but be parked for good, with what fn left of it, and its root and
// ids are what /proc shows as the whole daemon's (and, on cgroup v1, its
// memory cgroup the whole daemon's).
func onOwnThread(fn func() error) error {
	done := make(chan error, 1)
	run := func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Held here, the main thread cannot be the one the next
			// goroutine locks.
			started := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				close(started)
				done <- fn()
			}()
			<-started
			runtime.UnlockOSThread()
			return
		}
		done <- fn()
	}
	go run()
	return <-done
}

// confined confines the calling thread, which is locked and never
// unlocked, and runs fn on it. The raw system calls change the calling
// thread alone (Go's syscall.Setresuid would change every thread).
func (s *Server) confined(fn func() error) error {
	if s.chroot {
		if err := chrootThread(s.cfg.Workspace); err != nil {
			return fmt.Errorf("confine file operations: %w", err)
		}
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
		return fmt.Errorf("drop supplementary groups: %w", errno)
	}
	gid, uid := uintptr(s.cfg.GID), uintptr(s.cfg.UID)
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESGID, gid, gid, gid); errno != 0 {
		return fmt.Errorf("switch to the sandbox user's group: %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SETRESUID, uid, uid, uid); errno != 0 {
		return fmt.Errorf("switch to the sandbox user: %w", errno)
	}
	// A change of uid drops the capabilities, unless the daemon inherited
	// SECBIT_NO_SETUID_FIXUP (the linux provider's host side sets it on
	// the thread that starts the daemon): drop them outright.
	if err := dropCapabilities(); err != nil {
		return err
	}
	return fn()
}

// chrootThread makes dir the calling thread's root and working
// directory. Threads share these until one unshares them (CLONE_FS).
func chrootThread(dir string) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return err
	}
	if err := unix.Chroot(dir); err != nil {
		return err
	}
	return unix.Chdir("/")
}

// canChroot reports whether file operations can run in a root of their
// own, the workspace: the daemon needs CAP_SYS_CHROOT, and a seccomp
// filter that lets it unshare CLONE_FS. Docker's default filter allows
// unshare only with CAP_SYS_ADMIN, which the docker provider's daemon
// does not have: there the confinement is os.Root's, which a Linux
// kernel honours (O_NOFOLLOW at every step), and the user's rights.
func canChroot(dir string) bool {
	return onOwnThread(func() error { return chrootThread(dir) }) == nil
}

// dropCapabilities empties the calling thread's capability sets.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 takes two
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}

// fileError turns a failure on a workspace path into a typed error.
func (s *Server) fileError(op, name string, err error) error {
	var errno unix.Errno
	switch {
	case errors.Is(err, s.escape):
		return fmt.Errorf("%w: %s %q: path leaves %s", errdefs.ErrBadInput, op, name, provider.Workspace)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s %q: %w", op, name, fs.ErrNotExist)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %s %q: permission denied", errdefs.ErrBadInput, op, name)
	case errors.As(err, &errno) && (errno == unix.ENOTDIR || errno == unix.EISDIR || errno == unix.ELOOP ||
		errno == unix.ENAMETOOLONG || errno == unix.ENOTEMPTY || errno == unix.EEXIST || errno == unix.EINVAL):
		return fmt.Errorf("%w: %s %q: %v", errdefs.ErrBadInput, op, name, errno)
	case errors.As(err, &errno) && (errno == unix.ENOSPC || errno == unix.EDQUOT):
		return fmt.Errorf("%w: %s %q: workspace is full", errdefs.ErrBadInput, op, name)
	}
	return fmt.Errorf("%s %q: %w", op, name, err)
}

// relPath reads the path parameter of a request as a workspace path.
func (s *Server) relPath(r *http.Request) (string, string, error) {
	name := r.URL.Query().Get("path")
	rel, err := provider.WorkspacePath(name)
	return name, rel, err
}

// checkLinks refuses, where links are not seen by os.Root (see
// linkEscapes), a path that leaves the workspace through one; followFinal
// says whether the operation follows a link that is the path's last
// component (reads do; writes and removals replace or remove the link).
// It runs confined (asUser), as the operation does.
func (s *Server) checkLinks(name, rel string, followFinal bool) error {
	if s.noFsuid && s.linkEscapes(rel, followFinal) {
		return fmt.Errorf("%w: %q: path leaves %s", errdefs.ErrBadInput, name, provider.Workspace)
	}
	return nil
}

// fsuidMissing reports whether the kernel lacks setfsuid, as gVisor
// does. An invalid id changes nothing and returns the current one.
func fsuidMissing() bool {
	_, err := unix.SetfsuidRetUid(-1)
	return errors.Is(err, unix.ENOSYS)
}

// maxLinks is how many links a path may go through, as in Linux.
const maxLinks = 40

// linkEscapes reports whether resolving rel in the workspace goes
// through a symbolic link out of it. os.Root finds that out itself,
// except on gVisor, which follows a link that open is told not to
// follow when it is also told to open a directory: there file
// operations run in a root of their own, the workspace (asUser),
// so that a link cannot take them out whatever it says, and this check
// gives such paths the answer they get elsewhere, bad input. A link
// changed between the check and the operation changes only the answer.
func (s *Server) linkEscapes(rel string, followFinal bool) bool {
	parts := strings.Split(rel, "/")
	var resolved []string // components inside the workspace, not links
	links := 0
	for len(parts) > 0 {
		p := parts[0]
		parts = parts[1:]
		switch p {
		case "", ".":
			continue
		case "..":
			if len(resolved) == 0 {
				return true
			}
			resolved = resolved[:len(resolved)-1]
			continue
		}
		if len(parts) == 0 && !followFinal {
			return false
		}
		cur := path.Join(append(resolved, p)...)
		fi, err := s.root.Lstat(cur)
		if err != nil {
			return false // the operation reports it
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			resolved = append(resolved, p)
			continue
		}
		if links++; links > maxLinks {
			return false
		}
		target, err := s.root.Readlink(cur)
		if err != nil {
			return false
		}
		if path.IsAbs(target) {
			return true
		}
		parts = append(strings.Split(target, "/"), parts...)
	}
	return false
}

// open opens a workspace path for reading without ever waiting on it:
// O_NONBLOCK makes opening a fifo return at once instead of waiting for a
// writer that may never come, with a daemon thread pinned all along.
// Callers check the type of what they got before reading it; on regular
// files and directories the flag changes nothing.
func (s *Server) open(rel string) (*os.File, error) {
	return s.root.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK, 0)
}

func (s *Server) handleReadFile(w http.ResponseWriter, r *http.Request) {
	name, rel, err := s.relPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var f *os.File
	err = s.asUser(func() error {
		if err := s.checkLinks(name, rel, true); err != nil {
			return err
		}
		if f, err = s.open(rel); err != nil {
			return s.fileError("read", name, err)
		}
		return nil
	})
	if err != nil {
		writeError(w, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, s.fileError("read", name, err))
		return
	}
	if !fi.Mode().IsRegular() {
		writeError(w, fmt.Errorf("%w: read %q: not a regular file", errdefs.ErrBadInput, name))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	_, _ = io.Copy(w, f)
}

func (s *Server) handleWriteFile(w http.ResponseWriter, r *http.Request) {
	name, rel, err := s.relPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if err != nil || mode > 0o777 {
		writeError(w, fmt.Errorf("%w: write %q: bad mode %q", errdefs.ErrBadInput, name, r.URL.Query().Get("mode")))
		return
	}
	if err := s.writeFile(rel, name, r.Body, fs.FileMode(mode)); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// writeFile replaces a file atomically: it writes a temporary file beside
// it and renames it into place, so a reader never sees half a file, a
// failure leaves the old one, and a symbolic link at the path is replaced
// rather than written through.
func (s *Server) writeFile(rel, name string, r io.Reader, mode fs.FileMode) error {
	if rel == "." {
		return fmt.Errorf("%w: write %q: the workspace itself is not a file", errdefs.ErrBadInput, name)
	}
	mode = sanitizeMode(mode)
	return s.asUser(func() error {
		if err := s.checkLinks(name, rel, false); err != nil {
			return err
		}
		dir := path.Dir(rel)
		if err := s.root.MkdirAll(dir, 0o755); err != nil {
			return s.fileError("write", name, err)
		}
		tmp := path.Join(dir, ".berth-"+newID())
		f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return s.fileError("write", name, err)
		}
		_, err = io.Copy(f, r)
		if err == nil {
			err = f.Chmod(mode) // the umask may have narrowed it
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = s.root.Rename(tmp, rel)
		}
		if err != nil {
			_ = s.root.Remove(tmp)
			return s.fileError("write", name, err)
		}
		return nil
	})
}

// sanitizeMode keeps permission bits only: set-id and sticky bits from a
// caller have no business in a workspace. Zero means 0644.
func sanitizeMode(m fs.FileMode) fs.FileMode {
	if m &= fs.ModePerm; m == 0 {
		return 0o644
	}
	return m
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) {
	name, rel, err := s.relPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if rel == "." {
		writeError(w, fmt.Errorf("%w: remove %q: the workspace itself cannot be removed", errdefs.ErrBadInput, name))
		return
	}
	err = s.asUser(func() error {
		if err := s.checkLinks(name, rel, false); err != nil {
			return err
		}
		return s.remove(rel, name)
	})
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleListDir(w http.ResponseWriter, r *http.Request) {
	name, rel, err := s.relPath(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var infos []provider.FileInfo
	err = s.asUser(func() error {
		if err := s.checkLinks(name, rel, true); err != nil {
			return err
		}
		infos, err = s.listDir(rel, name)
		return err
	})
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, infos)
}

func (s *Server) listDir(rel, name string) ([]provider.FileInfo, error) {
	d, err := s.open(rel)
	if err != nil {
		return nil, s.fileError("list", name, err)
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: list %q: not a directory", errdefs.ErrBadInput, name)
	}
	entries, err := d.ReadDir(maxDirEntries + 1)
	if err != nil && err != io.EOF {
		return nil, s.fileError("list", name, err)
	}
	if len(entries) > maxDirEntries {
		return nil, fmt.Errorf("%w: list %q: more than %d entries", errdefs.ErrBadInput, name, maxDirEntries)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	infos := make([]provider.FileInfo, 0, len(entries))
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue // removed since the directory was read
		}
		info := provider.FileInfo{Name: e.Name(), Size: fi.Size(), Mode: fi.Mode(), ModTime: fi.ModTime()}
		if fi.Mode()&fs.ModeSymlink != 0 {
			info.Target, _ = s.root.Readlink(path.Join(rel, e.Name()))
		}
		infos = append(infos, info)
	}
	return infos, nil
}
