package sandboxd

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// removeAttempts bounds how often a directory is emptied again when
// entries appear in it while it is removed; past it the removal fails
// (ENOTEMPTY) rather than race a command for ever.
const removeAttempts = 3

// remove removes rel and everything below it, as the sandbox user, who
// owns what is in the workspace: a directory the user made read-only or
// unreadable is given back its owner's rights first, as the user could
// do, and the directory holding rel, made read-only, gets them for the
// time of the removal. Anything the user does not own and may not remove
// stays, and the removal fails. It runs confined (asUser); below rel it
// works relative to open directories, never by path, and does not follow
// links.
func (s *Server) remove(rel, name string) error {
	parent, err := s.root.Open(path.Dir(rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return s.fileError("remove", name, err)
	}
	defer parent.Close()
	err = removeAt(parent, path.Base(rel))
	if errors.Is(err, unix.EACCES) {
		if fi, serr := parent.Stat(); serr == nil && fi.IsDir() && fi.Mode().Perm()&0o300 != 0o300 {
			if parent.Chmod(fi.Mode().Perm()|0o300) == nil {
				err = removeAt(parent, path.Base(rel))
				_ = parent.Chmod(fi.Mode().Perm())
			}
		}
	}
	if err != nil {
		return s.fileError("remove", name, err)
	}
	return nil
}

// removeAt removes name, in the directory dir, and what is below it.
func removeAt(dir *os.File, name string) error {
	dfd := int(dir.Fd())
	for attempt := 1; ; attempt++ {
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return ignoreGone(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			err := ignoreGone(unix.Unlinkat(dfd, name, 0))
			if err == unix.EISDIR && attempt < removeAttempts {
				continue // became a directory meanwhile
			}
			return err
		}
		if err := emptyAt(dfd, name); err != nil {
			return err
		}
		err := ignoreGone(unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR))
		if (err == unix.ENOTEMPTY || err == unix.EEXIST || err == unix.ENOTDIR) && attempt < removeAttempts {
			continue // filled or replaced meanwhile
		}
		return err
	}
}

// emptyAt removes what is in the directory name in the directory dfd.
// Opening it without O_DIRECTORY is what makes O_NOFOLLOW hold on
// gVisor; what was opened is checked to be a directory.
func emptyAt(dfd int, name string) error {
	const flags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(dfd, name, flags, 0)
	if err == unix.EACCES {
		// A directory the user made unreadable. fchmodat follows a
		// link put in its place meanwhile: confined, it can reach only
		// what the user could chmod anyway.
		if unix.Fchmodat(dfd, name, 0o700, 0) == nil {
			fd, err = unix.Openat(dfd, name, flags, 0)
		}
	}
	if err != nil {
		return ignoreGone(err)
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return nil // replaced meanwhile: removeAt sees to it
	}
	if fi.Mode().Perm()&0o700 != 0o700 {
		if err := d.Chmod(fi.Mode().Perm() | 0o700); err != nil {
			return err
		}
	}
	var first error
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			if err := removeAt(d, n); err != nil && first == nil {
				first = err
			}
		}
		if err == io.EOF {
			return first
		}
		if err != nil {
			return ignoreGone(err)
		}
	}
}

// ignoreGone is err, or nil if it says the file is gone.
func ignoreGone(err error) error {
	if err == unix.ENOENT {
		return nil
	}
	return err
}
