package untar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Whiteout names of OCI and Docker image layers.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// layerEntry unpacks one entry of an image layer (Options.Layer).
func (x *extractor) layerEntry(hdr *tar.Header, rel string, r io.Reader) error {
	if rel == "." {
		if hdr.Typeflag != tar.TypeDir {
			return bad(hdr.Name, "the root of an image must be a directory")
		}
		return nil
	}
	if strings.HasPrefix(path.Base(rel), whiteoutPrefix) {
		return x.whiteout(hdr, rel)
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeLink:
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return bad(hdr.Name, "a symbolic link with a bad target")
		}
	case tar.TypeChar, tar.TypeBlock:
		return bad(hdr.Name, "device files are not allowed in an image")
	default:
		x.warn(hdr.Name, fmt.Sprintf("entries of type %q are not copied", hdr.Typeflag))
		return nil
	}
	dirfd, err := x.layerDir(hdr, path.Dir(rel))
	if err != nil {
		return err
	}
	name := path.Base(rel)
	if hdr.Typeflag != tar.TypeDir {
		// A file replaces a directory the layers below left there.
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := removeAllAt(dirfd, name); err != nil {
				return &os.PathError{Op: "replace", Path: x.tree.path(rel), Err: err}
			}
		}
	}
	x.seen[rel] = true
	delete(x.files, rel)
	return x.write(dirfd, name, rel, hdr, r)
}

// layerDir opens the directory dir of the tree, refusing to go through
// anything that is not a directory.
func (x *extractor) layerDir(hdr *tar.Header, dir string) (int, error) {
	fd, err := x.tree.open(dir)
	if errors.Is(err, unix.ENOTDIR) {
		return -1, bad(hdr.Name, "a parent of it is not a directory (a link or a file)")
	}
	return fd, err
}

// layerLink makes a hard link of an image layer: to a regular file of
// the tree, from this layer or one below.
func (x *extractor) layerLink(dirfd int, name, rel string, hdr *tar.Header) error {
	old, err := x.relName(hdr.Linkname, false)
	if err != nil {
		return bad(hdr.Name, "a hard link to %q, out of the image", truncate(hdr.Linkname))
	}
	olddir, err := x.tree.openFresh(path.Dir(old))
	if errors.Is(err, unix.ENOTDIR) {
		return bad(hdr.Name, "a hard link through %q, which is not a directory", truncate(path.Dir(old)))
	}
	if err != nil {
		return err
	}
	defer unix.Close(olddir)
	var st unix.Stat_t
	if err := unix.Fstatat(olddir, path.Base(old), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return bad(hdr.Name, "a hard link to %q, which is not a file of the image", truncate(hdr.Linkname))
	}
	if err := removeNonDir(dirfd, name); err != nil {
		return &os.PathError{Op: "replace", Path: x.tree.path(rel), Err: err}
	}
	if err := unix.Linkat(olddir, path.Base(old), dirfd, name, 0); err != nil {
		return &os.PathError{Op: "link", Path: x.tree.path(rel), Err: err}
	}
	x.files[rel] = true
	return nil
}

// whiteout removes what a whiteout entry at rel names from the layers
// below; what this layer made stays.
func (x *extractor) whiteout(hdr *tar.Header, rel string) error {
	dir, base := path.Dir(rel), path.Base(rel)
	name := strings.TrimPrefix(base, whiteoutPrefix)
	switch {
	case base == opaqueMarker:
	case strings.HasPrefix(name, whiteoutPrefix):
		// Other ".wh..wh." names are aufs's own bookkeeping.
		x.warn(hdr.Name, "aufs metadata is not copied")
		return nil
	case name == "" || name == "." || name == "..":
		return bad(hdr.Name, "a whiteout of %q", truncate(name))
	}
	dirfd, err := x.layerDir(hdr, dir)
	if err != nil {
		return err
	}
	if base == opaqueMarker {
		return x.opaque(dirfd, dir)
	}
	if x.seen[path.Join(dir, name)] {
		return nil
	}
	return x.removeLower(dirfd, dir, name)
}

// opaque empties the directory dir, open as dirfd, of what the layers
// below left in it, keeping what this layer made at any depth.
func (x *extractor) opaque(dirfd int, dir string) error {
	names, err := readDirNames(dirfd)
	if err != nil {
		return &os.PathError{Op: "readdir", Path: x.tree.path(dir), Err: err}
	}
	for _, n := range names {
		child := path.Join(dir, n)
		if !x.seen[child] {
			if err := x.removeLower(dirfd, dir, n); err != nil {
				return err
			}
			continue
		}
		fd, err := unix.Openat(dirfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOTDIR || err == unix.ELOOP {
			continue // a file or link of this layer
		}
		if err != nil {
			return &os.PathError{Op: "open", Path: x.tree.path(child), Err: err}
		}
		err = x.opaque(fd, child)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

func (x *extractor) removeLower(dirfd int, dir, name string) error {
	if err := removeAllAt(dirfd, name); err != nil {
		return &os.PathError{Op: "whiteout", Path: x.tree.path(path.Join(dir, name)), Err: err}
	}
	delete(x.files, path.Join(dir, name))
	return nil
}

// mode is the mode an entry gets: its permissions, and in a layer its
// sticky bit; never set-user-id or set-group-id bits.
func (x *extractor) mode(hdr *tar.Header) uint32 {
	if x.opts.Layer {
		return uint32(hdr.Mode) & 0o1777
	}
	return uint32(hdr.Mode) & 0o777
}

// chown gives a directory made on the way to an entry the owner of the
// image's root.
func (x *extractor) chown(fd int) error {
	if x.opts.Owner == nil {
		return nil
	}
	uid, gid := x.opts.Owner(0, 0)
	return unix.Fchown(fd, uid, gid)
}

func readDirNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// removeAllAt removes name in dirfd and all below it, following no link.
// A name that is missing is not an error.
func removeAllAt(dirfd int, name string) error {
	// os.RemoveAll opens the parent as named (here the directory dirfd
	// is) and below it follows no link.
	return os.RemoveAll(fdPath(dirfd) + "/" + name)
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
