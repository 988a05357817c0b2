package sandboxd

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"

	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/sparsetar"
	"github.com/berth-dev/berth/internal/tartree"
	"github.com/berth-dev/berth/internal/untar"
	"github.com/berth-dev/berth/provider"
)

func (s *Server) handleExport(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		ns, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			writeError(w, fmt.Errorf("%w: since=%q is not a time in Unix nanoseconds", errdefs.ErrBadInput, truncate(v)))
			return
		}
		since = time.Unix(0, ns)
	}
	top := "."
	var name string
	if r.URL.Query().Has("path") {
		var err error
		if name, top, err = s.relPath(r); err != nil {
			writeError(w, err)
			return
		}
	}
	// The export runs confined (see asUser), as every operation on the
	// workspace's contents does: it reads what the sandbox user may read
	// and nothing outside the workspace, whatever a command does to the
	// tree while it is walked. Its result is sent once the path is found.
	started := false
	err := s.asUser(func() error {
		if top != "." {
			if err := s.checkLinks(name, top, true); err != nil {
				return err
			}
			if _, err := s.root.Stat(top); err != nil {
				return s.fileError("export", name, err)
			}
		}
		w.Header().Set("Content-Type", "application/x-tar")
		started = true
		return s.export(w, top, since)
	})
	switch {
	case err == nil:
	case !started:
		writeError(w, err)
	default:
		// The status is sent; breaking the stream is how the client
		// learns that the archive is incomplete.
		s.log.Warn("export workspace", "err", err)
		panic(http.ErrAbortHandler)
	}
}

// export writes the workspace, or the file or directory top in it, as a
// tar stream, without ownership, so it unpacks the same on any provider.
// The names of the whole workspace's entries are their paths; those of
// top's start with top's base name, as tar -C would write them. Files
// that change while it runs are written as they were when opened: grown
// files are cut at the size seen then, shrunk ones padded with zeros.
// When since is not zero, files whose status has not changed since then
// come without their content (see provider.ChangedExporter).
func (s *Server) export(w io.Writer, top string, since time.Time) error {
	return tartree.Write(w, s.root, top, tartree.Options{
		Name: func(rel string) string {
			if top == "." {
				return rel
			}
			return path.Join(path.Base(top), rel)
		},
		// top may be a link to the directory to export.
		FollowTop: true,
		Live:      true,
		HardLinks: true,
		// A directory the sandbox user cannot read, or one replaced by a
		// link that leads out of the workspace while it was walked, is
		// written without its contents: the export holds what the user
		// can read, as unreadable files are left out (exportRegular).
		Skip: func(name string, err error) bool {
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, s.escape) ||
				errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
				s.log.Info("export: directory left out", "path", name, "err", err)
				return true
			}
			return false
		},
		Regular: func(tw *tar.Writer, hdr *tar.Header, name string, fi fs.FileInfo) (bool, error) {
			return s.exportRegular(tw, w, hdr, name, fi, since)
		},
	})
}

// exportRegular writes a regular file, or its header alone when its
// status has not changed since since, and reports whether it wrote it: a
// file removed or replaced since the walk saw it is left out.
func (s *Server) exportRegular(tw *tar.Writer, w io.Writer, hdr *tar.Header, name string, fi fs.FileInfo, since time.Time) (bool, error) {
	// A name that is not UTF-8 is sent whole: the provider API reads
	// files by UTF-8 names only, so Save could not ask for it later.
	if !since.IsZero() && !changedSince(fi, since) && utf8.ValidString(name) {
		hdr.Typeflag = tar.TypeReg
		hdr.PAXRecords = map[string]string{
			provider.PAXUnchanged: "1",
			provider.PAXSize:      strconv.FormatInt(fi.Size(), 10),
		}
		return true, tw.WriteHeader(hdr)
	}
	// O_NONBLOCK: a file replaced by a fifo since the walk saw it must
	// not stall the export; the type is checked below.
	f, err := s.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	fi, err = f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return false, nil
	}
	hdr.Typeflag, hdr.Size, hdr.ModTime = tar.TypeReg, fi.Size(), fi.ModTime()
	ext, sparse, err := s.extents(f, fi)
	if err != nil {
		return true, exportSkipped(tw, hdr, err)
	}
	if sparse {
		return true, exportSparse(tw, w, hdr, f, ext)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return true, err
	}
	n, err := io.Copy(tw, io.LimitReader(f, fi.Size()))
	if err != nil {
		return true, err
	}
	_, err = io.CopyN(tw, zeros{}, fi.Size()-n)
	return true, err
}

// extents lists where the data of a file with holes is, and reports
// false for a file to send whole. Where the file system does not say
// (gVisor calls every byte data), the file is read for blocks of zeros.
// An error says why the file must be left out: finding its holes, or
// sending it, would cost far more than its data (see checkScan and
// coalesce).
func (s *Server) extents(f *os.File, fi fs.FileInfo) ([]sparsetar.Extent, bool, error) {
	size := fi.Size()
	st, ok := fi.Sys().(*syscall.Stat_t)
	var ext []sparsetar.Extent
	switch {
	case ok && st.Blocks*512 < size:
		if ext, ok = seekExtents(f, size); !ok {
			return nil, false, nil
		}
		if extentsLen(ext) > 2*st.Blocks*512+sparsetar.BlockSize {
			// More data than blocks on disk: SEEK_DATA does not know.
			if err := checkScan(f, size); err != nil {
				return nil, false, err
			}
			if ext, ok = scanExtents(f, size); !ok {
				return nil, false, nil
			}
		}
	case s.noFsuid && size >= scanMin:
		if err := checkScan(f, size); err != nil {
			return nil, false, err
		}
		if ext, ok = scanExtents(f, size); !ok || extentsLen(ext) > size/2 {
			return nil, false, nil
		}
	default:
		return nil, false, nil
	}
	ext, err := coalesce(ext)
	return ext, err == nil, err
}

// Bounds on the runs of data of one file. A sparse entry carries at
// most sparsetar.MaxExtents: more are merged across the smallest holes
// between them, which then travel as zeros, at most as many bytes of
// zeros as of data (or minMerged). Past maxRuns, the runs are not even
// listed.
const (
	maxRuns   = 1 << 20
	minMerged = 64 << 20
)

// coalesce fits a file's runs of data into a sparse entry, or says why
// it cannot without sending much more than the data.
func coalesce(ext []sparsetar.Extent) ([]sparsetar.Extent, error) {
	if len(ext) <= sparsetar.MaxExtents {
		return ext, nil
	}
	if len(ext) > maxRuns {
		return nil, fmt.Errorf("more than %d runs of data, the most an export lists", maxRuns)
	}
	data := extentsLen(ext)
	merged := sparsetar.Coalesce(ext, sparsetar.MaxExtents)
	if zeros := extentsLen(merged) - data; zeros > max(data, minMerged) {
		return nil, fmt.Errorf("%d runs of data, more than the %d a sparse file carries, so far apart that merging them would send %d bytes of holes as zeros for %d bytes of data", len(ext), sparsetar.MaxExtents, zeros, data)
	}
	return merged, nil
}

// scanMin is the smallest file worth reading twice to find its holes
// where the file system does not say (see exportRegular).
const scanMin = 1 << 20

// maxScan bounds the size of a file read for its holes where the file
// system does not say where they are: reading costs the file's size,
// holes included, however little data it holds.
const maxScan = 64 << 30

// checkScan says whether a file of size bytes, whose holes the file
// system does not show, may be read whole: if it is at most maxScan, or
// if it is no larger than the bytes its file system uses, so that
// reading it costs no more than the data the workspace holds. A larger
// file is mostly holes, and is left out (see exportSkipped).
func checkScan(f *os.File, size int64) error {
	if size <= maxScan {
		return nil
	}
	var st unix.Statfs_t
	var used int64
	if err := unix.Fstatfs(int(f.Fd()), &st); err == nil {
		used = int64(st.Blocks-st.Bfree) * st.Frsize
	}
	if size <= used {
		return nil
	}
	return fmt.Errorf("%d bytes, holes included, on a file system that cannot show holes: more than the %d bytes read to find them, and than the %d bytes of data the file system holds", size, int64(maxScan), used)
}

// exportSkipped writes a regular file as left out, saying why (see
// provider.PAXSkipped).
func exportSkipped(tw *tar.Writer, hdr *tar.Header, why error) error {
	hdr.Size = 0
	hdr.PAXRecords = map[string]string{provider.PAXSkipped: why.Error()}
	return tw.WriteHeader(hdr)
}

func extentsLen(ext []sparsetar.Extent) int64 {
	var n int64
	for _, e := range ext {
		n += e.Len
	}
	return n
}

// scanExtents lists the blocks of a file that are not all zeros.
func scanExtents(f *os.File, size int64) ([]sparsetar.Extent, bool) {
	var ext []sparsetar.Extent
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		for i := 0; i < n; i += sparsetar.BlockSize {
			blk := buf[i:min(n, i+sparsetar.BlockSize)]
			if sparsetar.ZeroBlock(blk) {
				continue
			}
			at := off + int64(i)
			if k := len(ext) - 1; k >= 0 && ext[k].Off+ext[k].Len == at {
				ext[k].Len += int64(len(blk))
			} else if len(ext) > maxRuns {
				return ext, true // coalesce refuses it
			} else {
				ext = append(ext, sparsetar.Extent{Off: at, Len: int64(len(blk))})
			}
		}
		off += int64(n)
		if err == io.EOF || n == 0 {
			break // shrank meanwhile: exportSparse pads it
		}
		if err != nil {
			return nil, false
		}
	}
	return ext, true
}

// seekExtents lists where a file's data is by SEEK_DATA and SEEK_HOLE.
func seekExtents(f *os.File, size int64) ([]sparsetar.Extent, bool) {
	fd := int(f.Fd())
	var ext []sparsetar.Extent
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // a hole to the end
		}
		if err != nil {
			return nil, false
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return nil, false
		}
		hole = min(hole, size)
		if hole > data {
			if len(ext) > maxRuns {
				break // coalesce refuses it
			}
			ext = append(ext, sparsetar.Extent{Off: data, Len: hole - data})
		}
		off = hole
	}
	return ext, true
}

// exportSparse writes a sparse file's data extents only (see
// internal/sparsetar). Like exportFile, a file that shrinks while it is
// read is padded with zeros.
func exportSparse(tw *tar.Writer, w io.Writer, hdr *tar.Header, f *os.File, ext []sparsetar.Extent) error {
	dw, err := sparsetar.WriteHeader(tw, w, hdr, ext)
	if err != nil {
		return err
	}
	for _, e := range ext {
		n, err := io.Copy(dw, io.NewSectionReader(f, e.Off, e.Len))
		if err != nil {
			return err
		}
		if _, err := io.CopyN(dw, zeros{}, e.Len-n); err != nil {
			return err
		}
	}
	return dw.Close()
}

// changedSince reports whether a file's status changed at or after t.
// The status change time, unlike the modification time, cannot be set
// back by the sandbox: a file written then given an old mtime, or moved
// in from elsewhere, counts as changed.
func changedSince(fi fs.FileInfo, t time.Time) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	return !time.Unix(st.Ctim.Unix()).Before(t)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (s *Server) handleImport(w http.ResponseWriter, r *http.Request) {
	if err := s.asUser(func() error { return s.importTar(r.Body) }); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// importTar unpacks a tar stream over the workspace. It unpacks into a
// staging directory first and moves the result into place only when the
// whole archive was good, so a bad archive changes nothing. Symbolic
// links are made last, so no entry of the archive is ever written through
// a link the archive itself made.
func (s *Server) importTar(r io.Reader) error {
	stage := ".berth-import-" + newID()
	if err := s.root.Mkdir(stage, 0o700); err != nil {
		return s.fileError("import", stage, err)
	}
	defer s.root.RemoveAll(stage)
	im := &importer{s: s, stage: stage, opened: map[string]*os.File{}, buf: make([]byte, 256<<10), skipped: map[string]bool{}}
	defer im.close()
	if err := im.unpack(sparsetar.NewReader(r)); err != nil {
		return err
	}
	if err := im.finish(); err != nil {
		return err
	}
	if err := s.merge(stage, ".", true); err != nil {
		return err
	}
	return s.merge(stage, ".", false)
}

// importer unpacks an archive into a staging directory of the workspace.
type importer struct {
	s     *Server
	stage string
	links []deferred // symbolic links, made after everything else
	dirs  []deferred // directory modes and times, set after their contents
	// Files are made relative to their directory, opened once: resolving
	// every path from the workspace's root, component by component, cost
	// more than writing the files. In a sandbox every system call is dear
	// (seccomp takes the slow path in and out of the kernel), so files
	// are written with the few calls they need.
	opened map[string]*os.File
	buf    []byte
	// skipped names the files an export left out (provider.PAXSkipped).
	skipped map[string]bool
}

// deferred is what an entry leaves to be done once every file is in.
type deferred struct {
	name, target string
	mode         fs.FileMode
	mtime        time.Time
}

func (im *importer) close() {
	for _, d := range im.opened {
		d.Close()
	}
}

func (im *importer) unpack(tr *sparsetar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: import: reading archive: %v", errdefs.ErrBadInput, err)
		}
		if err := im.entry(hdr, tr); err != nil {
			return err
		}
	}
}

// entry unpacks one entry of the archive, whose data r holds.
func (im *importer) entry(hdr *tar.Header, r *sparsetar.Reader) error {
	s := im.s
	rel, err := archivePath(hdr.Name)
	if err != nil || rel == "." {
		return err
	}
	dst := path.Join(im.stage, rel)
	mode := sanitizeMode(fs.FileMode(hdr.Mode))
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := s.root.MkdirAll(dst, 0o755); err != nil {
			return s.fileError("import", hdr.Name, err)
		}
		im.dirs = append(im.dirs, deferred{name: dst, mode: mode, mtime: hdr.ModTime})
	case tar.TypeReg:
		if hdr.PAXRecords[provider.PAXSkipped] != "" {
			// An export left it out: there is nothing to make, nor to
			// link its other names to.
			im.skipped[rel] = true
			return nil
		}
		dir, err := im.dir(path.Dir(dst))
		if err != nil {
			return s.fileError("import", hdr.Name, err)
		}
		return s.unpackFile(dir, path.Base(dst), hdr, r, mode, im.buf)
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.ContainsRune(hdr.Linkname, 0) || len(hdr.Linkname) > provider.MaxPathLen {
			return fmt.Errorf("%w: import %q: bad link target", errdefs.ErrBadInput, hdr.Name)
		}
		im.links = append(im.links, deferred{name: dst, target: hdr.Linkname})
	case tar.TypeLink:
		if old, err := archivePath(hdr.Linkname); err == nil && im.skipped[old] {
			return nil
		}
		return im.hardLink(hdr, dst)
	default:
		return fmt.Errorf("%w: import %q: entries of type %q are not allowed", errdefs.ErrBadInput, hdr.Name, hdr.Typeflag)
	}
	return nil
}

// hardLink links dst to an earlier file of the archive.
func (im *importer) hardLink(hdr *tar.Header, dst string) error {
	s := im.s
	old, err := archivePath(hdr.Linkname)
	if err != nil {
		return err
	}
	if err := s.root.MkdirAll(path.Dir(dst), 0o755); err != nil {
		return s.fileError("import", hdr.Name, err)
	}
	if err := s.root.Link(path.Join(im.stage, old), dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: import %q: hard link to %q, which is not an earlier file of the archive", errdefs.ErrBadInput, hdr.Name, hdr.Linkname)
		}
		return s.fileError("import", hdr.Name, err)
	}
	return nil
}

// dir is the directory dir of the staging tree, made if need be, as an
// open descriptor.
func (im *importer) dir(dir string) (int, error) {
	if d, ok := im.opened[dir]; ok {
		return int(d.Fd()), nil
	}
	if err := im.s.root.MkdirAll(dir, 0o755); err != nil {
		return -1, err
	}
	d, err := im.s.root.Open(dir)
	if err != nil {
		return -1, err
	}
	im.opened[dir] = d
	return int(d.Fd()), nil
}

// finish makes the symbolic links, then sets the directories' modes and
// times, deepest first: a directory made read-only before its contents
// were in would refuse them.
func (im *importer) finish() error {
	s := im.s
	for _, l := range im.links {
		if err := s.root.MkdirAll(path.Dir(l.name), 0o755); err != nil {
			return s.fileError("import", l.name, err)
		}
		if err := s.root.Symlink(l.target, l.name); err != nil {
			return s.fileError("import", strings.TrimPrefix(l.name, im.stage+"/"), err)
		}
	}
	for _, d := range slices.Backward(im.dirs) {
		_ = s.root.Chmod(d.name, d.mode|0o700)
		_ = s.root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return nil
}

// archivePath checks an entry name from an archive: relative, inside.
// Names are bytes, as the kernel has them: a name that is not UTF-8 is
// the workspace's own (a snapshot carries it), so only NUL, length and
// escapes are refused.
func archivePath(name string) (string, error) {
	if path.IsAbs(name) {
		return "", fmt.Errorf("%w: import: absolute entry %q", errdefs.ErrBadInput, truncate(name))
	}
	if name == "" || len(name) > provider.MaxPathLen || strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: import: entry %q must be 1 to %d bytes without NUL", errdefs.ErrBadInput, truncate(name), provider.MaxPathLen)
	}
	if provider.Escapes(name) {
		return "", fmt.Errorf("%w: import: entry %q leaves %s", errdefs.ErrBadInput, truncate(name), provider.Workspace)
	}
	return path.Clean(name), nil
}

// unpackFile writes one file of an archive as name in the directory
// open as dirfd. name is one path component, and O_NOFOLLOW refuses a
// symbolic link in its place, so the file cannot land elsewhere. A
// sparse file's data is written at its extents and its holes left as
// holes: never written, never read as zeros.
func (s *Server) unpackFile(dirfd int, name string, hdr *tar.Header, r *sparsetar.Reader, mode fs.FileMode, buf []byte) error {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(mode))
	if err != nil {
		return s.fileError("import", hdr.Name, err)
	}
	if ext, ok := r.Extents(); ok {
		_, err = untar.WriteExtents(fd, r, ext, hdr.Size, buf)
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: import %q: the archive ends inside it", errdefs.ErrBadInput, truncate(hdr.Name))
		}
	} else {
		_, err = untar.WriteData(fd, r, buf)
	}
	if err == nil {
		err = unix.Fchmod(fd, uint32(mode))
	}
	if err == nil {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		_ = unix.UtimesNanoAt(dirfd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if errors.Is(err, errdefs.ErrBadInput) {
		return err
	}
	if err != nil {
		return s.fileError("import", hdr.Name, err)
	}
	return nil
}

// merge moves the contents of staging directory src over dst. Where both
// are directories it merges them; a symbolic link at dst where the
// archive has a directory is followed, as WriteFile follows it, and must
// stay in the workspace; anything else at dst is replaced. With check
// set it only looks for conflicts, so that a bad archive is refused
// before anything moves.
func (s *Server) merge(src, dst string, check bool) error {
	d, err := s.root.Open(src)
	if err != nil {
		return s.fileError("import", src, err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return s.fileError("import", src, err)
	}
	for _, e := range entries {
		from, to := path.Join(src, e.Name()), path.Join(dst, e.Name())
		cur, err := s.root.Lstat(to)
		if err == nil && e.IsDir() && cur.Mode()&fs.ModeSymlink != 0 {
			cur, err = s.root.Stat(to)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return s.fileError("import", to, err)
			}
		}
		switch {
		case err == nil && e.IsDir() && cur.IsDir():
			if err := s.merge(from, to, check); err != nil {
				return err
			}
			if fi, err := s.root.Lstat(from); err == nil && !check {
				_ = s.root.Chmod(to, fi.Mode().Perm())
				_ = s.root.Chtimes(to, fi.ModTime(), fi.ModTime())
			}
			continue
		case check:
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return s.fileError("import", to, err)
			}
			continue
		case err == nil:
			if err := s.remove(to, to); err != nil {
				return err
			}
		case !errors.Is(err, fs.ErrNotExist):
			return s.fileError("import", to, err)
		}
		if err := s.root.Rename(from, to); err != nil {
			return s.fileError("import", to, err)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
