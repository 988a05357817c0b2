package snapshot

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gocloud.dev/blob"
	"golang.org/x/sync/errgroup"

	"github.com/berth-dev/berth/provider"
)

// How Save cuts file contents into chunks.
//
// Fixed-size chunks, not content-defined ones: measured here, restic's
// Rabin chunker runs at 330-530 MB/s on one core, about as slow as zstd
// -1 on data that does not compress, and would cost the first snapshot
// its race against tar|zstd. What content-defined chunking adds, dedup
// after an insertion in the middle of a large file, is rare in
// workspaces: large files there are rewritten whole (build outputs),
// appended to (logs) or changed in place (databases), all of which fixed
// chunks handle.
//
// 4 MiB, not 1: zstd compressed a workspace 15% faster in 4 MiB pieces
// than in 1 MiB ones (its per-call set-up), and a quarter of the objects
// means a quarter of the requests. A one-byte change in a large file
// stores 4 MiB at most.
//
// Small files are packed because a workspace holds tens of thousands of
// them: one object each would mean as many requests per snapshot.
const (
	chunkSize = 4 << 20   // large files are cut into chunks of this size
	packLimit = 256 << 10 // files smaller than this are packed together
	packSize  = chunkSize // a pack is sealed before the file that would take it past this
)

// uploaders is how many chunk writes run at once. Writes are I/O, so
// more of them than cores keeps a remote bucket busy.
const uploaders = 8

// SaveOptions says how to save a snapshot. The zero value saves a user
// snapshot with a random id, reading every file.
type SaveOptions struct {
	// Kind is KindUser when empty.
	Kind Kind
	// Labels are kept with the snapshot, e.g. the sandbox id and the
	// owning workflow; see provider.ValidateLabels for their limits.
	Labels map[string]string
	// ID names the snapshot (see provider.ValidateID); empty means a new
	// random id. When a snapshot with this id exists, Save returns it and
	// reads nothing, so a retried Save does not save twice.
	ID string
	// Parent names an earlier snapshot of the same workspace: chunks it
	// references are not looked up nor written again. A parent that does
	// not exist is ignored (Info.Parent is then empty). It must not be
	// deleted while the Save runs.
	Parent string
	// Source names the workspace the Source reads, e.g. the provider and
	// the sandbox id. When it is not empty and equal to the parent's, Save
	// asks the source only for what changed since the parent started,
	// trusting the source's ctimes against this process's clock (give or
	// take WithClockMargin). So it must name one filesystem on one clock:
	// include the host for a host-bound sandbox, and give a sandbox that
	// was re-created a new name.
	Source string
	// Progress, if not nil, is called from a goroutine of Save's every
	// half second and once at the end, never twice at once.
	Progress func(Progress)
}

// Save reads the workspace from src and stores it as a new snapshot.
// Nothing is saved when it fails: the chunks it wrote are removed by a
// later GC.
func (s *Store) Save(ctx context.Context, src Source, opts SaveOptions) (Info, error) {
	kind, err := opts.check()
	if err != nil {
		return Info{}, err
	}
	id := opts.ID
	if id == "" {
		id = newID()
	} else {
		info, err := s.Stat(ctx, id)
		if err == nil {
			return info, nil
		}
		if !errors.Is(err, ErrNotFound) {
			return Info{}, err
		}
	}

	started := s.now().UTC()
	sv := &saver{store: s, src: src}
	if opts.Parent != "" {
		parent, err := s.loadManifest(ctx, opts.Parent)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return Info{}, fmt.Errorf("snapshot: parent: %w", err)
		default:
			sv.useParent(parent)
		}
	}
	var since time.Time
	if sv.parent != nil && opts.Source != "" && sv.parent.Source == opts.Source {
		since = sv.parent.Started.Add(-s.clockMargin)
	}
	if err := sv.run(ctx, since, opts.Progress); err != nil {
		return Info{}, err
	}
	// Past half the grace period, a GC may have deleted a chunk this
	// save found in the bucket and did not write again (see putChunk).
	if took := s.now().Sub(started); took > s.grace/2 {
		return Info{}, fmt.Errorf("snapshot: save took %s, more than half the GC grace period (%s), so its chunks may be gone: raise the grace period with WithGracePeriod", took.Round(time.Second), s.grace)
	}

	m := &manifest{
		header: header{
			Version: formatVersion,
			ID:      id,
			Kind:    kind,
			Created: s.now().UTC(),
			Started: started,
			Labels:  opts.Labels,
			Source:  opts.Source,
			Entries: len(sv.entries),
			Files:   sv.files,
			Size:    sv.size,
			Stored:  sv.transferred.Load(),
		},
		entries: sv.entries,
	}
	if sv.parent != nil {
		m.Parent = sv.parent.ID
	}
	data, err := encodeManifest(m)
	if err != nil {
		return Info{}, fmt.Errorf("snapshot: encode manifest: %w", err)
	}
	err = s.bucket.Upload(ctx, manifestKey(id), bytes.NewReader(data), &blob.WriterOptions{ContentType: "application/zstd"})
	if err != nil {
		return Info{}, fmt.Errorf("snapshot: write manifest %s: %w", id, err)
	}
	return m.info(), nil
}

// check checks the options and returns the kind of snapshot to save.
func (opts *SaveOptions) check() (Kind, error) {
	kind := opts.Kind
	if kind == "" {
		kind = KindUser
	}
	if kind != KindUser && kind != KindCheckpoint {
		return "", fmt.Errorf("%w: snapshot kind %q: want %q or %q", ErrBadInput, truncate(string(kind)), KindUser, KindCheckpoint)
	}
	if err := provider.ValidateLabels(opts.Labels); err != nil {
		return "", fmt.Errorf("snapshot labels: %w", err)
	}
	if opts.ID != "" {
		if err := checkID(opts.ID); err != nil {
			return "", err
		}
	}
	if opts.Parent != "" {
		if err := checkID(opts.Parent); err != nil {
			return "", fmt.Errorf("parent: %w", err)
		}
	}
	return kind, nil
}

// newID returns a random snapshot id. Ids are random, not derived from
// the contents: two saves of the same tree with different labels or kinds
// are two snapshots, each deleted on its own, and the id is known before
// the tree is read.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// saver is one Save under way. A producer goroutine reads the tar stream,
// records entries and cuts file contents into chunks and packs; workers
// (one per core) hash and compress them; uploaders write the new ones.
type saver struct {
	store *Store
	src   Source

	// From the parent, read only.
	parent       *manifest
	parentByPath map[string]*entry
	parentSums   map[hash]*ref     // packed small files, by the hash of their contents
	parentChunks map[hash]struct{} // every chunk the parent references

	// Owned by the producer.
	entries []*entry
	check   checker
	files   int
	size    int64
	pack    *job // the pack being filled

	jobs    chan *job
	uploads chan upload
	// Free lists of chunk buffers and of compressed buffers. Their
	// sizes bound the memory a save uses; buffers are made on first use
	// (a nil in the list) and reused to the end of the save.
	free, freeCompressed chan *[]byte

	mu      sync.Mutex
	claimed map[hash]struct{} // chunks this save has stored or is storing

	doneFiles, doneBytes, transferred atomic.Int64
}

// job is a buffer for a worker: one chunk of a large file, or a pack of
// small files.
type job struct {
	buf   *[]byte
	ref   *ref         // the chunk's reference, whose hash the worker fills in
	files []packedFile // or the files of a pack
}

type packedFile struct {
	e        *entry
	off, len int64 // where the file is in the buffer
}

type upload struct {
	hash hash
	buf  *[]byte // compressed
}

func (sv *saver) useParent(m *manifest) {
	sv.parent = m
	sv.parentByPath = make(map[string]*entry, len(m.entries))
	sv.parentSums = make(map[hash]*ref)
	sv.parentChunks = make(map[hash]struct{})
	for _, e := range m.entries {
		sv.parentByPath[e.Path] = e
		for _, r := range e.Chunks {
			sv.parentChunks[r.Hash] = struct{}{}
		}
		if e.Sum != nil && len(e.Chunks) == 1 {
			sv.parentSums[*e.Sum] = e.Chunks[0]
		}
	}
}

func (sv *saver) run(ctx context.Context, since time.Time, progress func(Progress)) error {
	workers := runtime.GOMAXPROCS(0)
	sv.jobs = make(chan *job, workers)
	sv.uploads = make(chan upload, uploaders)
	// Enough buffers for the producer to fill some while each worker
	// works on one, and compressed ones for every worker and uploader.
	sv.free = freeList(2*workers + 2)
	sv.freeCompressed = freeList(workers + uploaders)
	sv.claimed = make(map[hash]struct{})

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(sv.jobs)
		return sv.produce(gctx, since)
	})
	var working sync.WaitGroup
	for range workers {
		working.Add(1)
		g.Go(func() error {
			defer working.Done()
			return sv.work(gctx)
		})
	}
	g.Go(func() error {
		working.Wait()
		close(sv.uploads)
		return nil
	})
	for range uploaders {
		g.Go(func() error { return sv.upload(gctx) })
	}

	stop := reportEvery(progress, sv.progress)
	err := g.Wait()
	stop()
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("snapshot: save: %w", context.Cause(ctx))
	}
	return err
}

func (sv *saver) progress() Progress {
	return Progress{Files: sv.doneFiles.Load(), Bytes: sv.doneBytes.Load(), Transferred: sv.transferred.Load()}
}

// reportEvery calls report(get()) every progressInterval until the
// returned function is called, which reports once more and returns after
// the last call.
func reportEvery(report func(Progress), get func() Progress) (stop func()) {
	if report == nil {
		return func() {}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				report(get())
			case <-done:
				report(get())
				return
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// produce reads the source's tar stream into entries and jobs.
func (sv *saver) produce(ctx context.Context, since time.Time) error {
	rc, err := sv.src.Export(ctx, since)
	if err != nil {
		return fmt.Errorf("snapshot: export: %w", err)
	}
	defer rc.Close()
	// The tar reader reads 512-byte blocks; a buffer makes those memory
	// copies rather than reads of the stream (a pipe, an HTTP body).
	tr := tar.NewReader(bufio.NewReaderSize(rc, 256<<10))
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
		if err := sv.check.add(e); err != nil {
			return fmt.Errorf("%w: snapshot: source archive: %v", ErrBadInput, err)
		}
		if e.Type == typeFile {
			if hdr.PAXRecords[UnchangedRecord] == "1" {
				err = sv.addUnchanged(ctx, e, hdr)
			} else {
				err = sv.addContents(ctx, e, tr, hdr.Size)
			}
			if errors.Is(err, errVanished) {
				delete(sv.check.seen, e.Path)
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
	if err != nil {
		return fmt.Errorf("snapshot: read %q from the source: %w", e.Path, err)
	}
	defer rc.Close()
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

func freeList(n int) chan *[]byte {
	l := make(chan *[]byte, n)
	for range n {
		l <- nil
	}
	return l
}

// take returns an empty buffer of at least size bytes from a free list,
// waiting while all are in use.
func take(ctx context.Context, list chan *[]byte, size int) (*[]byte, error) {
	var buf *[]byte
	select {
	case buf = <-list:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if buf == nil {
		b := make([]byte, 0, size)
		buf = &b
	}
	*buf = (*buf)[:0]
	return buf, nil
}

// acquire returns an empty buffer that holds a chunk.
func (sv *saver) acquire(ctx context.Context) (*[]byte, error) {
	return take(ctx, sv.free, chunkSize)
}

func (sv *saver) release(buf *[]byte) { sv.free <- buf }

func (sv *saver) send(ctx context.Context, j *job) error {
	select {
	case sv.jobs <- j:
		return nil
	case <-ctx.Done():
		sv.release(j.buf)
		return context.Cause(ctx)
	}
}

// work hashes and compresses jobs until there are none left.
func (sv *saver) work(ctx context.Context) error {
	for j := range sv.jobs {
		var err error
		if j.ref != nil {
			err = sv.workChunk(ctx, j)
		} else {
			err = sv.workPack(ctx, j)
		}
		sv.release(j.buf)
		if err != nil {
			return err
		}
	}
	return nil
}

func (sv *saver) workChunk(ctx context.Context, j *job) error {
	data := *j.buf
	j.ref.Hash = sha256.Sum256(data)
	return sv.storeChunk(ctx, j.ref.Hash, data)
}

// workPack finds each small file of a pack in the parent, or else keeps
// it in the pack; the pack, shrunk to the files that were not found, is
// stored as one chunk.
func (sv *saver) workPack(ctx context.Context, j *job) error {
	data := *j.buf
	var end int64            // the kept files are moved to data[:end]
	kept := map[hash]int64{} // where each kept content is, so duplicates are kept once
	var fresh []packedFile   // files in the new pack, off updated
	for _, f := range j.files {
		content := data[f.off : f.off+f.len]
		sum := hash(sha256.Sum256(content))
		f.e.Sum = &sum
		if r, ok := sv.parentSums[sum]; ok {
			f.e.Chunks = []*ref{r}
			continue
		}
		if off, ok := kept[sum]; ok {
			fresh = append(fresh, packedFile{e: f.e, off: off, len: f.len})
			continue
		}
		copy(data[end:], content) // end <= f.off: the move never overwrites a file not yet read
		kept[sum] = end
		fresh = append(fresh, packedFile{e: f.e, off: end, len: f.len})
		end += f.len
	}
	if len(fresh) == 0 {
		return nil
	}
	pack := data[:end]
	h := hash(sha256.Sum256(pack))
	for _, f := range fresh {
		f.e.Chunks = []*ref{{Hash: h, Off: f.off, Len: f.len}}
	}
	return sv.storeChunk(ctx, h, pack)
}

// storeChunk compresses a chunk and queues it for upload, unless the
// parent has it or this save already stored it.
func (sv *saver) storeChunk(ctx context.Context, h hash, data []byte) error {
	if _, ok := sv.parentChunks[h]; ok {
		return nil
	}
	sv.mu.Lock()
	_, dup := sv.claimed[h]
	sv.claimed[h] = struct{}{}
	sv.mu.Unlock()
	if dup {
		return nil
	}
	cbuf, err := take(ctx, sv.freeCompressed, len(data)+len(data)/64+1024)
	if err != nil {
		return err
	}
	*cbuf = sv.store.enc.EncodeAll(data, *cbuf)
	select {
	case sv.uploads <- upload{hash: h, buf: cbuf}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (sv *saver) upload(ctx context.Context) error {
	for u := range sv.uploads {
		n, err := sv.store.putChunk(ctx, u.hash, *u.buf)
		sv.freeCompressed <- u.buf
		if err != nil {
			return err
		}
		sv.transferred.Add(n)
	}
	return nil
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
