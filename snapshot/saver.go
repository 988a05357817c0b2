package snapshot

import (
	"context"
	"crypto/sha256"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/berth-dev/berth/internal/sparsetar"
)

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
	entries      []*entry
	check        checker
	files        int
	size         int64 // of the files kept so far, holes included
	pack         *job  // the pack being filled
	skipped      int
	skippedPaths []string
	lastSkipped  string
	leftOut      map[string]bool // regular files left out, by path

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
	if sparsetar.ZeroBlock(data) {
		// A hole, or zeros: the ref keeps the zero hash, which marks a
		// hole, and there is nothing to hash, store or fetch. Checked
		// here, not in the producer, so that the scan runs on every
		// core rather than the one that reads the stream.
		return nil
	}
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
