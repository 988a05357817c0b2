// Package tartree writes a tree of files as a tar stream: directories,
// symbolic links and regular files, without ownership, so that it
// unpacks the same anywhere. Sockets, pipes and devices do not travel.
// berth cp writes a host's tree into a sandbox through it, and the
// sandbox daemon exports a workspace through it.
package tartree

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

// FS is the file system a tree is read from. *os.Root is one; Host is
// the host's own, names being paths.
type FS interface {
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
}

// Host is the host's file system: names are its paths.
type Host struct{}

// Stat is os.Stat.
func (Host) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// Lstat is os.Lstat.
func (Host) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }

// Readlink is os.Readlink.
func (Host) Readlink(name string) (string, error) { return os.Readlink(name) }

// OpenFile is os.OpenFile.
func (Host) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}

// Options say how a tree is written. The zero value writes every entry's
// name as its path below the top, fails on any error, and writes each
// name of a file with several as a copy.
type Options struct {
	// Name is the name in the archive of the entry rel, its path below
	// the top ("." for the top itself, "a", "a/b"). An entry named "."
	// is not written. Nil means rel itself.
	Name func(rel string) string
	// FollowTop walks what the top names when it is a symbolic link,
	// rather than writing the link.
	FollowTop bool
	// Live is for a tree that changes while it is written: entries
	// removed meanwhile, and links that cannot be read, are left out
	// rather than failing the whole.
	Live bool
	// HardLinks writes the second and later names of a file with
	// several as hard links to its first.
	HardLinks bool
	// Skip, if set, reports whether a directory that cannot be opened or
	// read, for err, is written without its contents rather than failing
	// the whole. Nil skips none but, when Live, those removed meanwhile.
	Skip func(name string, err error) bool
	// Regular writes a regular file: hdr is its header but for its type
	// and size. It reports whether it wrote it; a file it leaves out has
	// no later hard links to it. Nil writes the file whole, as it is
	// when opened.
	Regular func(tw *tar.Writer, hdr *tar.Header, name string, fi fs.FileInfo) (bool, error)
}

// Write writes the tree at top in fsys to w as a tar stream, parents
// first, names in lexical order.
func Write(w io.Writer, fsys FS, top string, opts Options) error {
	tw := tar.NewWriter(w)
	t := &tree{fsys: fsys, tw: tw, opts: opts, names: map[inode]string{}}
	if t.opts.Name == nil {
		t.opts.Name = func(rel string) string { return rel }
	}
	if t.opts.Regular == nil {
		t.opts.Regular = t.regular
	}
	stat := fsys.Lstat
	if opts.FollowTop {
		stat = fsys.Stat
	}
	fi, err := stat(top)
	if err != nil {
		return err
	}
	if err := t.walk(top, ".", fi); err != nil {
		return err
	}
	return tw.Close()
}

type inode struct{ dev, ino uint64 }

type tree struct {
	fsys FS
	tw   *tar.Writer
	opts Options
	// The first name of every file with more than one, by inode.
	names map[inode]string
}

// walk writes name, whose path below the top is rel, and what is below
// it. Unlike io/fs, it takes any name the kernel does: io/fs refuses
// names that are not UTF-8.
func (t *tree) walk(name, rel string, fi fs.FileInfo) error {
	if err := t.entry(name, rel, fi); err != nil || !fi.IsDir() {
		return err
	}
	d, err := t.fsys.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if t.skip(name, err) {
			return nil
		}
		return err
	}
	// What was opened must be the directory seen: one replaced since,
	// by a link say, is not walked, so the walk never goes where a link
	// leads nor round a loop, however the file system resolves names.
	if dfi, err := d.Stat(); err != nil || !os.SameFile(fi, dfi) {
		d.Close()
		if err == nil {
			err = fmt.Errorf("%s: replaced while the tree was written", name)
		}
		if t.opts.Live {
			return nil
		}
		return err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil && !t.skip(name, err) {
		return err
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			if t.opts.Live {
				continue // removed since the directory was read
			}
			return err
		}
		if err := t.walk(path.Join(name, e.Name()), path.Join(rel, e.Name()), fi); err != nil {
			return err
		}
	}
	return nil
}

// skip reports whether the directory name, which failed with err, is
// written without its contents.
func (t *tree) skip(name string, err error) bool {
	if t.opts.Live && errors.Is(err, fs.ErrNotExist) {
		return true
	}
	return t.opts.Skip != nil && t.opts.Skip(name, err)
}

// entry writes one entry.
func (t *tree) entry(name, rel string, fi fs.FileInfo) error {
	tarName := t.opts.Name(rel)
	if tarName == "." {
		return nil
	}
	hdr := &tar.Header{Name: tarName, Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	switch {
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, tarName+"/"
		return t.tw.WriteHeader(hdr)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := t.fsys.Readlink(name)
		if err != nil {
			if t.opts.Live {
				return nil
			}
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return t.tw.WriteHeader(hdr)
	case fi.Mode().IsRegular():
		st, _ := fi.Sys().(*syscall.Stat_t)
		linked := t.opts.HardLinks && st != nil && st.Nlink > 1
		var id inode
		if linked {
			id = inode{uint64(st.Dev), st.Ino}
			if first, ok := t.names[id]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return t.tw.WriteHeader(hdr)
			}
		}
		wrote, err := t.opts.Regular(t.tw, hdr, name, fi)
		if wrote && linked {
			t.names[id] = tarName
		}
		return err
	}
	return nil
}

// regular writes a regular file whole, as it is when opened.
func (t *tree) regular(tw *tar.Writer, hdr *tar.Header, name string, fi fs.FileInfo) (bool, error) {
	f, err := t.fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return true, err
	}
	_, err = io.CopyN(tw, f, fi.Size())
	return true, err
}
