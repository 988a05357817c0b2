package snapshot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/sparsetar"
	"github.com/berth-dev/berth/provider"
)

// produce reads the source's tar stream into entries and jobs.
func (sv *saver) produce(ctx context.Context, since time.Time) error {
	rc, err := sv.src.Export(ctx, since)
	if err != nil {
		return fmt.Errorf("snapshot: export: %w", err)
	}
	defer rc.Close()
	// The tar reader reads 512-byte blocks; a buffer makes those memory
	// copies rather than reads of the stream (a pipe, an HTTP body).
	tr := sparsetar.NewReader(bufio.NewReaderSize(rc, 256<<10))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, tar.ErrHeader) {
				err = fmt.Errorf("%w: %v", ErrBadInput, err)
			}
			return fmt.Errorf("snapshot: reading the source's archive: %w", err)
		}
		e, err := entryFromHeader(hdr)
		if err != nil {
			return err
		}
		if e == nil {
			continue
		}
		// Paths are checked before any content is read. The checker
		// sees files without their contents, which come later, so its
		// totals are not used here.
		if e.Type == typeHardlink && sv.leftOut[e.Target] {
			// Another name of a file left out: there is nothing to
			// link it to.
			sv.skip(e.Path, errors.New("a hard link to a file left out"))
			continue
		}
		if err := sv.check.add(e); err != nil {
			if errors.Is(err, errPathTooLong) {
				// The workspace may hold it (the kernel bounds
				// components, not paths); a restore could not make it.
				sv.skip(e.Path, err)
				continue
			}
			return fmt.Errorf("%w: snapshot: source archive: %v", ErrBadInput, err)
		}
		if e.Type == typeFile {
			err = sv.checkSize(hdr)
			switch {
			case err != nil:
			case hdr.PAXRecords[UnchangedRecord] == "1":
				err = sv.addUnchanged(ctx, e, hdr)
			default:
				if ext, ok := tr.Extents(); ok {
					err = sv.addSparse(ctx, e, tr, ext, hdr.Size)
				} else {
					err = sv.addContents(ctx, e, tr, hdr.Size)
				}
			}
			if errors.Is(err, errVanished) {
				delete(sv.check.seen, e.Path)
				sv.leaveOut(e.Path)
				continue
			}
			var skip *skipError
			if errors.As(err, &skip) {
				delete(sv.check.seen, e.Path)
				sv.leaveOut(e.Path)
				sv.skip(e.Path, skip.err)
				continue
			}
			if err != nil {
				return err
			}
			sv.files++
			sv.size += e.Size
			sv.doneFiles.Add(1)
		}
		sv.entries = append(sv.entries, e)
	}
	return sv.sealPack(ctx)
}

// Bounds on mtimes, so that they fit in int64 nanoseconds.
var (
	minTime = time.Unix(0, -1<<63)
	maxTime = time.Unix(0, 1<<63-1)
)

// entryFromHeader makes an entry from a tar header, or returns nil for
// entries that carry nothing to keep: the root and PAX global headers.
func entryFromHeader(hdr *tar.Header) (*entry, error) {
	name := hdr.Name
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil, nil
	case tar.TypeDir:
		name = strings.TrimSuffix(name, "/")
		if name == "" || name == "." {
			return nil, nil
		}
	}
	name = strings.TrimPrefix(name, "./") // as tar -C dir . writes them
	if hdr.ModTime.Before(minTime) || hdr.ModTime.After(maxTime) {
		return nil, fmt.Errorf("%w: snapshot: source archive: %q: mtime out of range", ErrBadInput, truncate(name))
	}
	e := &entry{Path: name, Mode: hdr.Mode & 0o7777, MTime: hdr.ModTime.UnixNano()}
	switch hdr.Typeflag {
	case tar.TypeReg:
		e.Type = typeFile
	case tar.TypeDir:
		e.Type = typeDir
	case tar.TypeSymlink:
		e.Type, e.Target = typeSymlink, hdr.Linkname
	case tar.TypeLink:
		e.Type, e.Target = typeHardlink, strings.TrimPrefix(hdr.Linkname, "./")
	default:
		return nil, fmt.Errorf("%w: snapshot: source archive: %q: entries of type %q are not allowed", ErrBadInput, truncate(name), hdr.Typeflag)
	}
	return e, nil
}

// errVanished: a file the archive listed was gone when Save asked for it.
var errVanished = errors.New("file vanished")

// skipError: a file Save leaves out, saying why (see Info.Skipped).
type skipError struct{ err error }

func (e *skipError) Error() string { return e.err.Error() }

// maxSkippedPaths bounds Info.SkippedPaths; Info.Skipped counts them all.
const maxSkippedPaths = 16

// skip leaves a path out of the snapshot. Save's result says so; the
// caller logs it.
// Below a directory left out, only the directory is named.
func (sv *saver) skip(path string, why error) {
	sv.skipped++
	if n := len(sv.skippedPaths); n > 0 && strings.HasPrefix(path, sv.lastSkipped+"/") {
		return
	}
	sv.lastSkipped = path
	if len(sv.skippedPaths) < maxSkippedPaths {
		// The end of a long path says more than its start.
		if len(path) > 80 {
			path = "..." + path[len(path)-77:]
		}
		sv.skippedPaths = append(sv.skippedPaths, fmt.Sprintf("%q: %v", path, why))
	}
}

// checkSize leaves out a file the source left out (see
// provider.PAXSkipped); a file whose size, holes included, passes the
// store's bounds (see WithMaxFileSize), before anything of it is read;
// and a sparse file in a format that the tar reader reads holes and all,
// as zeros: reading a hole of terabytes would cost what the hole does
// not, and sandboxd never writes that format.
func (sv *saver) checkSize(hdr *tar.Header) error {
	size := hdr.Size
	if hdr.PAXRecords[UnchangedRecord] == "1" && hdr.PAXRecords[provider.PAXSkipped] == "" {
		n, err := strconv.ParseInt(hdr.PAXRecords[SizeRecord], 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: snapshot: source archive: %q: bad %s record", ErrBadInput, truncate(hdr.Name), SizeRecord)
		}
		size = n
	}
	switch {
	case hdr.PAXRecords[provider.PAXSkipped] != "":
		return &skipError{fmt.Errorf("left out by the source: %s", truncate(hdr.PAXRecords[provider.PAXSkipped]))}
	case sparsetar.Foreign(hdr):
		return &skipError{errors.New("a sparse file in a format whose holes would be read as zeros")}
	case size > sv.store.maxFileSize:
		return &skipError{fmt.Errorf("%d bytes, holes included, more than the %d a snapshot keeps of one file", size, sv.store.maxFileSize)}
	case size > sv.store.maxTotalSize-sv.size:
		return &skipError{fmt.Errorf("%d bytes, holes included, would take the snapshot past the %d bytes of files it keeps", size, sv.store.maxTotalSize)}
	}
	return nil
}

// addSparse reads a sparse file's data, which r holds for the extents
// ext, into chunks; the holes between them are references to no chunk,
// one whatever its length. Chunks are cut at the same offsets as a file
// without holes is, so that both share them.
func (sv *saver) addSparse(ctx context.Context, e *entry, r io.Reader, ext []sparsetar.Extent, size int64) error {
	if size < packLimit {
		// Small: packed whole, its few holes as zeros.
		b := make([]byte, size)
		for _, x := range ext {
			if _, err := io.ReadFull(r, b[x.Off:x.Off+x.Len]); err != nil {
				return readErr(ctx, fmt.Errorf("snapshot: read %q from the source: %w", e.Path, err))
			}
		}
		return sv.addSmall(ctx, e, bytes.NewReader(b), size)
	}
	hole := func(n int64) {
		if n > 0 {
			e.Chunks = append(e.Chunks, &ref{Len: n})
			e.Size += n
			sv.doneBytes.Add(n)
		}
	}
	for _, x := range ext {
		hole(x.Off - e.Size)
		for end := x.Off + x.Len; e.Size < end; {
			n := min(end, (e.Size/chunkSize+1)*chunkSize) - e.Size
			buf, err := sv.acquire(ctx)
			if err != nil {
				return err
			}
			if _, err := io.ReadFull(r, (*buf)[:n]); err != nil {
				sv.release(buf)
				return readErr(ctx, fmt.Errorf("snapshot: read %q from the source: %w", e.Path, err))
			}
			*buf = (*buf)[:n]
			r := &ref{Len: n}
			e.Chunks = append(e.Chunks, r)
			e.Size += n
			sv.doneBytes.Add(n)
			if err := sv.send(ctx, &job{buf: buf, ref: r}); err != nil {
				return err
			}
		}
	}
	hole(size - e.Size)
	return nil
}

// leaveOut records a regular file left out, so that its other names
// (hard links to it) are left out too.
func (sv *saver) leaveOut(path string) {
	if sv.leftOut == nil {
		sv.leftOut = make(map[string]bool)
	}
	sv.leftOut[path] = true
}

// addUnchanged takes a file the source sent without contents from the
// parent, or else asks the source for it.
func (sv *saver) addUnchanged(ctx context.Context, e *entry, hdr *tar.Header) error {
	size, err := strconv.ParseInt(hdr.PAXRecords[SizeRecord], 10, 64)
	if p := sv.parentFile(e.Path); err == nil && p != nil && p.Size == size && p.Mode == e.Mode && p.MTime == e.MTime {
		e.Size, e.Sum, e.Chunks = p.Size, p.Sum, p.Chunks
		sv.doneBytes.Add(e.Size)
		return nil
	}
	rc, err := sv.src.ReadFile(ctx, e.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return errVanished // like a file removed while the source walked
	}
	if errors.Is(err, ErrBadInput) {
		// The source refuses the path (a name its API cannot take,
		// a file replaced by a fifo): one file, not the snapshot.
		return &skipError{err}
	}
	if err != nil {
		return fmt.Errorf("snapshot: read %q from the source: %w", e.Path, err)
	}
	defer rc.Close()
	if sf, ok := rc.(extentReader); ok {
		if ext, size, ok := sf.Extents(); ok {
			if size > sv.store.maxFileSize || size > sv.store.maxTotalSize-sv.size {
				return &skipError{fmt.Errorf("%d bytes, holes included, more than a snapshot keeps", size)}
			}
			return sv.addSparse(ctx, e, rc, ext, size)
		}
	}
	return sv.addContents(ctx, e, rc, -1)
}

// parentFile returns the parent's regular file at path, following a hard
// link to the file it shares contents with.
func (sv *saver) parentFile(path string) *entry {
	p := sv.parentByPath[path]
	if p != nil && p.Type == typeHardlink {
		p = sv.parentByPath[p.Target]
	}
	if p == nil || p.Type != typeFile {
		return nil
	}
	return p
}

// addContents reads a file's contents from r, size bytes or, when size is
// negative, up to the end: a small file into the current pack, a large
// one into chunks.
func (sv *saver) addContents(ctx context.Context, e *entry, r io.Reader, size int64) error {
	if size >= 0 && size < packLimit {
		return sv.addSmall(ctx, e, r, size)
	}
	for first := true; ; first = false {
		buf, err := sv.acquire(ctx)
		if err != nil {
			return err
		}
		n, err := readFull(r, (*buf)[:chunkSize])
		if err != nil && err != io.EOF {
			sv.release(buf)
			return readErr(ctx, fmt.Errorf("snapshot: read %q from the source: %w", e.Path, err))
		}
		if first && err == io.EOF && n < packLimit {
			// A file of unknown size turned out small.
			err = sv.addSmall(ctx, e, bytes.NewReader((*buf)[:n]), int64(n))
			sv.release(buf)
			return err
		}
		if n > 0 {
			*buf = (*buf)[:n]
			r := &ref{Len: int64(n)}
			e.Chunks = append(e.Chunks, r)
			e.Size += int64(n)
			sv.doneBytes.Add(int64(n))
			if err := sv.send(ctx, &job{buf: buf, ref: r}); err != nil {
				return err
			}
		} else {
			sv.release(buf)
		}
		if err == io.EOF {
			return nil
		}
	}
}

// addSmall appends a small file to the current pack.
func (sv *saver) addSmall(ctx context.Context, e *entry, r io.Reader, size int64) error {
	e.Size = size
	if size == 0 {
		return nil
	}
	if sv.pack != nil && int64(len(*sv.pack.buf))+size > packSize {
		if err := sv.sealPack(ctx); err != nil {
			return err
		}
	}
	if sv.pack == nil {
		buf, err := sv.acquire(ctx)
		if err != nil {
			return err
		}
		sv.pack = &job{buf: buf}
	}
	b := *sv.pack.buf
	off := int64(len(b))
	n, err := readFull(r, b[off:off+size])
	if err == nil || (err == io.EOF && int64(n) == size) {
		*sv.pack.buf = b[:off+size]
		sv.pack.files = append(sv.pack.files, packedFile{e: e, off: off, len: size})
		sv.doneBytes.Add(size)
		return nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return readErr(ctx, fmt.Errorf("snapshot: read %q from the source: %w", e.Path, err))
}

// sealPack hands the current pack, if any, to the workers.
func (sv *saver) sealPack(ctx context.Context) error {
	p := sv.pack
	if p == nil {
		return nil
	}
	sv.pack = nil
	return sv.send(ctx, p)
}

// readFull reads into b until it is full or r ends. Unlike io.ReadFull it
// returns io.EOF for an end after some bytes, which is how a file that is
// not a multiple of the buffer ends.
func readFull(r io.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := r.Read(b[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
