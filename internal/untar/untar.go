// Package untar unpacks a hostile tar stream into a directory on the
// host, confined to it.
//
// The stream comes from a sandbox: every name, link, type, size and count
// in it is treated as hostile. What Extract writes stays below the target:
//
//   - no symbolic link on the host is followed below the target's parent,
//     the target included: every path is resolved one component at a time
//     with O_NOFOLLOW, and a link (or file) standing where the archive has
//     a directory or a file is replaced, never written through;
//   - symbolic links whose target leaves the unpacked tree (absolute, or
//     climbing above it, or using ".." after a name, which a link inside
//     the tree could turn into a climb) are skipped with a warning;
//   - hard links must name a regular file unpacked earlier from the same
//     stream; others are skipped with a warning;
//   - only regular files, directories and links are made: devices, fifos
//     and other types are skipped with a warning, and set-user-id,
//     set-group-id and sticky bits are dropped;
//   - the bytes written and the number of entries are bounded (see
//     [Options]), and a file's data must match its header's size.
//
// The path the caller names as the target's parent is the caller's: it is
// resolved as the kernel resolves it, links included, as cp does.
//
// With Options.Layer, the stream is a layer of a container image applied
// over a root filesystem, and the rules are an image's: see [Options].
package untar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/sparsetar"
	"github.com/berth-dev/berth/provider"
)

// Default bounds, raised through Options: a workspace copied out whole is
// rarely beyond them, and a stream beyond them is more likely an attempt
// to fill the host's disk.
const (
	DefaultMaxBytes   = 64 << 30 // bytes of file data written
	DefaultMaxEntries = 1 << 20  // entries of the stream
)

// ErrLimit is wrapped by the error of an extraction stopped by a bound.
var ErrLimit = errors.New("untar: limit reached")

// ErrBadArchive is wrapped by the error of an archive that cannot be
// unpacked as it says: a name leaving the target, a short file, a second
// top entry.
var ErrBadArchive = errors.New("untar: bad archive")

// Options say how to unpack. The zero value unpacks a tree whose top
// entry becomes the target, within the default bounds, and drops
// warnings.
type Options struct {
	// Root says that the archive is a whole tree whose entries are named
	// by their paths, all unpacked under the target; otherwise the
	// archive's first entry becomes the target and what is under it goes
	// under the target (an export of one file or directory).
	Root bool
	// MaxBytes bounds the bytes of file contents; zero means
	// DefaultMaxBytes. Files are counted at their full size, holes
	// included, though holes and blocks of zeros take no disk.
	MaxBytes int64
	// MaxEntries bounds the number of entries; zero means
	// DefaultMaxEntries.
	MaxEntries int
	// Warn, if not nil, is told of every entry skipped, by its name in
	// the archive, and why.
	Warn func(name, reason string)

	// Layer unpacks the archive as a layer of an OCI or Docker image over
	// the tree at the target, which earlier layers made (Root is
	// implied). What leaves the tree is refused rather than skipped, and
	// what an image needs is kept:
	//
	//   - whiteouts (".wh.name") remove name as the layers below left it,
	//     and an opaque marker (".wh..wh..opq") empties its directory of
	//     what they left; a whiteout of ".", ".." or "" is refused;
	//   - symbolic links are made whatever their target, since they are
	//     resolved in the image's root, never on the host, where nothing
	//     follows them; an entry below one (a parent that is not a
	//     directory) is refused;
	//   - hard links must name a regular file already in the tree;
	//   - device files are refused; fifos and other types are skipped;
	//   - sticky bits are kept, and a directory's mode is kept as it is;
	//     set-user-id and set-group-id bits are dropped: the host's copy
	//     of an image must give no host user another's rights, and in a
	//     sandbox (no_new_privs, nosuid mounts) they would do nothing;
	//   - a file or a directory replaces whatever is at its name.
	Layer bool
	// Owner, if not nil, says who owns each entry on the host given the
	// uid and gid its header names. Nil leaves entries to the caller.
	Owner func(uid, gid int) (int, int)
	// Usage, if not nil, is added what was unpacked, also when an error
	// stopped the extraction.
	Usage *Usage
}

// Usage counts what extractions unpacked.
type Usage struct {
	Bytes   int64 // of file data, holes included
	Entries int   // of the archives
}

// Extract unpacks the tar stream r to target (see Options.Root). It stops
// at the first error, leaving what it unpacked so far.
func Extract(r io.Reader, target string, opts Options) error {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.Layer {
		opts.Root = true
	}
	target = filepath.Clean(target)
	x := &extractor{opts: opts, budget: opts.MaxBytes, parent: -1, files: map[string]bool{}, buf: make([]byte, 256<<10)}
	if opts.Layer {
		x.seen = map[string]bool{}
	}
	defer x.close()
	if opts.Usage != nil {
		defer func() {
			opts.Usage.Bytes += opts.MaxBytes - x.budget
			opts.Usage.Entries += x.entries
		}()
	}
	if opts.Root {
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		fd, err := unix.Open(target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: target, Err: err}
		}
		x.tree = newDirs(fd, target)
		if opts.Layer {
			x.tree.strict = true
			x.tree.made = x.chown
		}
	} else {
		parent := filepath.Dir(target)
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		fd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: parent, Err: err}
		}
		x.parent, x.base = fd, filepath.Base(target)
		x.target = target
	}
	x.tr = sparsetar.NewReader(r)
	return x.run()
}

type extractor struct {
	opts    Options
	budget  int64
	entries int

	// Top mode: the directory holding the target, the target's name, and
	// the first component every entry's name starts with.
	parent int
	base   string
	target string
	top    string
	single bool // the top entry was not a directory: nothing may follow

	tree     *dirs           // the unpacked tree's directories, nil until made
	files    map[string]bool // regular files unpacked, by their path in the tree
	seen     map[string]bool // Layer: every path this layer made
	dirModes []dirMode       // set when everything is unpacked
	buf      []byte
	tr       *sparsetar.Reader
}

type dirMode struct {
	rel   string
	mode  uint32
	mtime time.Time
}

func (x *extractor) close() {
	if x.tree != nil {
		x.tree.close()
	}
	if x.parent >= 0 {
		unix.Close(x.parent)
	}
}

func (x *extractor) warn(name, reason string) {
	if x.opts.Warn != nil {
		x.opts.Warn(name, reason)
	}
}

func bad(name, format string, args ...any) error {
	return fmt.Errorf("%w: entry %q: %s", ErrBadArchive, truncate(name), fmt.Sprintf(format, args...))
}

func (x *extractor) run() error {
	first := true
	for {
		hdr, err := x.tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadArchive, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		x.entries++
		if x.entries > x.opts.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrLimit, x.opts.MaxEntries)
		}
		rel, err := x.relName(hdr.Name, first)
		if err != nil {
			return err
		}
		first = false
		if err := x.entry(hdr, rel, x.tr); err != nil {
			return err
		}
	}
	if first && !x.opts.Root {
		return fmt.Errorf("%w: the archive is empty", ErrBadArchive)
	}
	// Directory modes last, deepest first: a directory made read-only
	// before its contents were written would refuse them.
	for _, d := range slices.Backward(x.dirModes) {
		if err := x.setDirMode(d); err != nil {
			return err
		}
	}
	return nil
}

// relName is where an entry goes in the tree: its path below the target,
// "." for the top entry itself.
func (x *extractor) relName(name string, first bool) (string, error) {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if name == "" || provider.Escapes(name) {
		return "", bad(name, "it leaves the destination")
	}
	if x.opts.Root {
		return clean, nil
	}
	top, rest, _ := strings.Cut(clean, "/")
	if first {
		x.top = top
	} else if top != x.top {
		return "", bad(name, "outside the archive's top entry %q", truncate(x.top))
	}
	if rest == "" {
		if !first {
			return "", bad(name, "the top entry again")
		}
		return ".", nil
	}
	return rest, nil
}

func (x *extractor) entry(hdr *tar.Header, rel string, r io.Reader) error {
	if x.opts.Layer {
		return x.layerEntry(hdr, rel, r)
	}
	if x.single {
		return bad(hdr.Name, "below a top entry that is not a directory")
	}
	if rel == "." {
		return x.topEntry(hdr, r)
	}
	if err := x.ensureTree(); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		x.warn(hdr.Name, fmt.Sprintf("entries of type %q are not copied", hdr.Typeflag))
		return nil
	}
	if why := hdr.PAXRecords[provider.PAXSkipped]; why != "" && hdr.Typeflag == tar.TypeReg {
		x.warn(hdr.Name, "left out by the sandbox: "+truncate(why))
		return nil
	}
	if hdr.Typeflag == tar.TypeSymlink {
		if reason := unsafeLink(rel, hdr.Linkname); reason != "" {
			x.warn(hdr.Name, reason)
			return nil
		}
	}
	dirfd, err := x.tree.open(path.Dir(rel))
	if err != nil {
		return err
	}
	delete(x.files, rel)
	return x.write(dirfd, path.Base(rel), rel, hdr, r)
}

// topEntry unpacks the archive's first entry as the target itself.
func (x *extractor) topEntry(hdr *tar.Header, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.ensureTree()
	case tar.TypeReg:
		x.single = true
		if why := hdr.PAXRecords[provider.PAXSkipped]; why != "" {
			x.warn(hdr.Name, "left out by the sandbox: "+truncate(why))
			return nil
		}
		return x.write(x.parent, x.base, ".", hdr, r)
	case tar.TypeSymlink:
		x.single = true
		x.warn(hdr.Name, "a symbolic link to "+strconv.Quote(truncate(hdr.Linkname))+" out of what is copied")
		return nil
	}
	x.single = true
	x.warn(hdr.Name, fmt.Sprintf("entries of type %q are not copied", hdr.Typeflag))
	return nil
}

// ensureTree makes the target a directory, unless it is one, and opens it.
func (x *extractor) ensureTree() error {
	if x.tree != nil {
		return nil
	}
	fd, _, err := openDir(x.parent, x.base, false)
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: x.target, Err: err}
	}
	x.tree = newDirs(fd, x.target)
	return nil
}

// write makes one entry as name in the directory open as dirfd; rel
// names it in the tree, for hard links and messages.
func (x *extractor) write(dirfd int, name, rel string, hdr *tar.Header, r io.Reader) error {
	perm := uint32(hdr.Mode) & 0o777
	where := x.target
	if rel != "." {
		where = x.tree.path(rel)
	}
	fail := func(op string, err error) error { return &os.PathError{Op: op, Path: where, Err: err} }
	switch hdr.Typeflag {
	case tar.TypeDir:
		fd, _, err := openDir(dirfd, name, false)
		if err != nil {
			return fail("mkdir", err)
		}
		if x.opts.Owner != nil {
			uid, gid := x.opts.Owner(hdr.Uid, hdr.Gid)
			err = unix.Fchown(fd, uid, gid)
		}
		unix.Close(fd)
		if err != nil {
			return fail("chown", err)
		}
		mode := perm | 0o700
		if x.opts.Layer {
			mode = x.mode(hdr)
		}
		x.dirModes = append(x.dirModes, dirMode{rel: rel, mode: mode, mtime: hdr.ModTime})
		return nil
	case tar.TypeReg:
		if hdr.Size < 0 || hdr.Size > x.budget {
			return fmt.Errorf("%w: %s: %d bytes, more than the %d bytes a copy may write (Options.MaxBytes)", ErrLimit, where, hdr.Size, x.opts.MaxBytes)
		}
		if err := removeNonDir(dirfd, name); err != nil {
			return fail("replace", err)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fail("create", err)
		}
		err = x.copyData(fd, r, hdr)
		if err == nil && x.opts.Owner != nil {
			// Before the mode: a change of owner clears set-user-id.
			uid, gid := x.opts.Owner(hdr.Uid, hdr.Gid)
			err = unix.Fchown(fd, uid, gid)
		}
		if err == nil {
			err = unix.Fchmod(fd, x.mode(hdr)) // not through the umask
		}
		if err == nil {
			ts := unix.NsecToTimespec(hdr.ModTime.UnixNano())
			err = unix.Futimes(fd, []unix.Timeval{unix.NsecToTimeval(unix.TimespecToNsec(ts)), unix.NsecToTimeval(unix.TimespecToNsec(ts))})
		}
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) || errors.Is(err, ErrBadArchive) || errors.Is(err, ErrLimit) {
				return err
			}
			return fail("write", err)
		}
		if rel != "." {
			x.files[rel] = true
		}
		return nil
	case tar.TypeSymlink:
		if err := removeNonDir(dirfd, name); err != nil {
			return fail("replace", err)
		}
		if err := unix.Symlinkat(hdr.Linkname, dirfd, name); err != nil {
			return fail("symlink", err)
		}
		if x.opts.Owner != nil {
			uid, gid := x.opts.Owner(hdr.Uid, hdr.Gid)
			if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fail("chown", err)
			}
		}
		return nil
	case tar.TypeLink:
		if x.opts.Layer {
			return x.layerLink(dirfd, name, rel, hdr)
		}
		old, err := x.relName(hdr.Linkname, false)
		if err != nil || !x.files[old] {
			x.warn(hdr.Name, "a hard link to "+strconv.Quote(truncate(hdr.Linkname))+", which is not a file copied before it")
			return nil
		}
		olddir, err := x.tree.openFresh(path.Dir(old))
		if err != nil {
			return err
		}
		defer unix.Close(olddir)
		if err := removeNonDir(dirfd, name); err != nil {
			return fail("replace", err)
		}
		// Flags 0: linkat does not follow a link at the old name, so
		// even a file replaced since cannot lead out.
		if err := unix.Linkat(olddir, path.Base(old), dirfd, name, 0); err != nil {
			return fail("link", err)
		}
		x.files[rel] = true
		return nil
	}
	return nil
}

// copyData writes a regular file's data, exactly as many bytes as its
// header says, counting them against the budget: a sparse file's holes
// count, though they cost neither work nor disk.
func (x *extractor) copyData(fd int, r io.Reader, hdr *tar.Header) error {
	if ext, ok := x.tr.Extents(); ok {
		var data int64
		for _, e := range ext {
			data += e.Len
		}
		n, err := WriteExtents(fd, readErrors{r, hdr.Name}, ext, hdr.Size, x.buf)
		x.budget -= hdr.Size
		if err == io.ErrUnexpectedEOF || err == nil && n != data {
			return bad(hdr.Name, "%d bytes of data, its sparse map says %d", n, data)
		}
		return err
	}
	n, err := WriteData(fd, readErrors{r, hdr.Name}, x.buf)
	x.budget -= n
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return bad(hdr.Name, "%d bytes of data, its header says %d", n, hdr.Size)
	}
	return nil
}

// readErrors reports an error reading an entry's data as the archive's.
type readErrors struct {
	r    io.Reader
	name string
}

func (r readErrors) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		err = fmt.Errorf("%w: %s: %v", ErrBadArchive, truncate(r.name), err)
	}
	return n, err
}

// WriteData copies r to fd, a new, empty file, through buf, and returns
// the bytes read. Blocks of zeros are skipped with a seek rather than
// written, so that runs of zeros take no disk: an unpacked file never
// takes more space than its data. A stream cut short ends the file where
// it stops.
func WriteData(fd int, r io.Reader, buf []byte) (int64, error) {
	size, err := writeRuns(fd, r, buf)
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		// A file ending in zeros ends in a hole, which only a truncate
		// makes part of the file.
		return size, unix.Ftruncate(fd, size)
	}
	return size, err
}

// WriteExtents writes a sparse file's data, read from r, at its extents
// in fd, a new, empty file, and makes the file size bytes long: the holes
// between the extents are never written, so the work and the disk it
// takes are its data's, whatever its size. It returns the bytes of data
// read; r ending before the extents are full is io.ErrUnexpectedEOF.
func WriteExtents(fd int, r io.Reader, ext []sparsetar.Extent, size int64, buf []byte) (int64, error) {
	var total int64
	for _, e := range ext {
		if e.Off < 0 || e.Len < 0 || e.Off+e.Len > size {
			return total, fmt.Errorf("%w: extent %d+%d outside a file of %d bytes", ErrBadArchive, e.Off, e.Len, size)
		}
		if _, err := unix.Seek(fd, e.Off, io.SeekStart); err != nil {
			return total, err
		}
		n, err := writeRuns(fd, io.LimitReader(r, e.Len), buf)
		total += n
		if err != io.EOF && err != io.ErrUnexpectedEOF {
			return total, err
		}
		if n != e.Len {
			return total, io.ErrUnexpectedEOF
		}
	}
	return total, unix.Ftruncate(fd, size)
}

// writeRuns copies r to fd from its offset, skipping blocks of zeros,
// until r ends, and returns the bytes read and how r ended: io.EOF or
// io.ErrUnexpectedEOF when it did, else an error.
func writeRuns(fd int, r io.Reader, buf []byte) (int64, error) {
	var size int64
	for {
		n, err := io.ReadFull(r, buf)
		for b := buf[:n]; len(b) > 0; {
			// Runs of data blocks are written with one call, and runs
			// of zero blocks skipped with one: a call per block costs
			// much in a sandbox (gVisor's writes of 4 KiB reach 60 MB/s,
			// of 256 KiB over 1 GB/s).
			run, zero := blockRun(b)
			if zero {
				if _, serr := unix.Seek(fd, int64(run), io.SeekCurrent); serr != nil {
					return size, serr
				}
				b = b[run:]
				continue
			}
			for data := b[:run]; len(data) > 0; {
				m, werr := unix.Write(fd, data)
				if werr == unix.EINTR {
					continue
				}
				if werr != nil {
					return size, werr
				}
				data = data[m:]
			}
			b = b[run:]
		}
		size += int64(n)
		if err != nil {
			return size, err
		}
	}
}

// blockRun returns the length of the run of blocks at the head of b
// that are all zeros, or all not, and which of the two they are.
func blockRun(b []byte) (n int, zero bool) {
	zero = sparsetar.ZeroBlock(b[:min(len(b), sparsetar.BlockSize)])
	for n < len(b) {
		blk := b[n:min(len(b), n+sparsetar.BlockSize)]
		if sparsetar.ZeroBlock(blk) != zero {
			break
		}
		n += len(blk)
	}
	return n, zero
}

func (x *extractor) setDirMode(d dirMode) error {
	dirfd, name := x.parent, x.base
	if d.rel != "." {
		fd, err := x.tree.openFresh(path.Dir(d.rel))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		dirfd, name = fd, path.Base(d.rel)
	}
	// AT_SYMLINK_NOFOLLOW: whatever is there now, no link is followed.
	ts := []unix.Timespec{unix.NsecToTimespec(d.mtime.UnixNano()), unix.NsecToTimespec(d.mtime.UnixNano())}
	_ = unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	_ = unix.Fchmodat(dirfd, name, d.mode, 0)
	return nil
}

// unsafeLink says why a symbolic link at rel (a path in the tree) to
// target could lead out of the tree, or "" if it cannot. Its target must
// be relative, climb at most as far as the tree's top, and only at its
// start: "a/../.." looks inside when read as text, but if a is itself a
// link to "." it climbs one level more, so ".." after a name is refused.
func unsafeLink(rel, target string) string {
	switch {
	case target == "" || strings.IndexByte(target, 0) >= 0:
		return "a symbolic link with a bad target"
	case path.IsAbs(target):
		return "a symbolic link to the absolute path " + strconv.Quote(truncate(target)) + ", out of what is copied"
	}
	depth := 0
	if d := path.Dir(rel); d != "." {
		depth = strings.Count(d, "/") + 1
	}
	climbing := true
	for _, el := range strings.Split(target, "/") {
		switch {
		case el == "..":
			if !climbing {
				return "a symbolic link to " + strconv.Quote(truncate(target)) + ": \"..\" after a name could lead out of what is copied"
			}
			depth--
			if depth < 0 {
				return "a symbolic link to " + strconv.Quote(truncate(target)) + ", out of what is copied"
			}
		case el == "" || el == ".":
		default:
			climbing = false
		}
	}
	return ""
}

// removeNonDir removes what is at name unless it is a directory or
// missing, so that a file or link made there is made in its place rather
// than through it. A directory in the way is an error from what follows.
func removeNonDir(dirfd int, name string) error {
	var st unix.Stat_t
	err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return unix.EISDIR
	}
	return unix.Unlinkat(dirfd, name, 0)
}

// openDir opens the directory name in dirfd, making it if it is missing
// (made says so) and, unless strict, replacing whatever else is there, a
// symbolic link included, never following one. Strict, what is there
// and is not a directory is an error, ENOTDIR.
func openDir(dirfd int, name string, strict bool) (fd int, made bool, err error) {
	for range 3 { // a second try after making or replacing it
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
			return fd, made, nil
		case unix.ENOENT:
			if err := unix.Mkdirat(dirfd, name, 0o755); err != nil && err != unix.EEXIST {
				return -1, false, err
			}
			made = true
		case unix.ELOOP, unix.ENOTDIR:
			// A symbolic link or a file where a directory goes.
			if strict {
				return -1, false, unix.ENOTDIR
			}
			if err := unix.Unlinkat(dirfd, name, 0); err != nil && err != unix.ENOENT {
				return -1, false, err
			}
		default:
			return -1, false, err
		}
	}
	return -1, false, unix.ELOOP
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
