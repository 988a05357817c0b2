// Package image turns container images into root filesystems for the
// self-hosted providers: a content-addressed cache of read-only
// directories that sandboxes share, so that an image means the same
// thing on every backend that has no image store of its own.
//
// An image is a Docker image present on the host's Docker engine, named
// as docker names it ("python:3.12-slim", an id), or an OCI image layout
// directory ("oci:/path/to/layout:tag", or a path). [Cache.RootFS]
// unpacks its layers once, applying whiteouts, into
//
//	<dir>/<algorithm>/<hex>
//
// named by the Docker image's id or the OCI manifest's digest, and
// returns that directory; later calls only look it up. Unpacking takes a
// lock per image shared by every process on the host, writes below
// <dir>/tmp and renames the result into place, so that a directory the
// cache returns is always whole, and what a crash left is removed by the
// next process to open the cache. Nothing writes an image's directory
// once it is in place: providers mount it read-only.
//
// Every byte of an image is hostile: entries are confined to the image's
// root (see internal/untar's Options.Layer), device files are refused,
// and an image is bounded in bytes and entries (MaxSize, MaxFiles).
// Files keep their owners' numeric ids, shifted by the cache's IDShift so
// that a provider whose sandboxes map their root to a host uid sees them
// owned as the image says; set-user-id and set-group-id bits are
// dropped, and the cache directory is root's alone (0700): no host user
// may run an image's program as its owner's uid. Providers hand an image
// to their sandboxes by descriptor or as root.
package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/moby/moby/client"
	"github.com/opencontainers/go-digest"
	"golang.org/x/sys/unix"

	"github.com/berth-dev/berth/internal/untar"
)

// Default bounds of one image, unpacked: larger than the images agents
// usually run on (python:3.12-slim is 130 MB in 7,000 files; a CUDA
// image 10 GB), small enough that a hostile image cannot fill a host.
const (
	DefaultMaxSize  = 16 << 30
	DefaultMaxFiles = 1 << 20
)

// IDRange is how many user and group ids of an image are kept: a
// sandbox's user namespace maps that many. Files owned by ids beyond it
// are given to the overflow id, 65534 ("nobody").
const IDRange = 65536

const overflowID = 65534

// ErrInUse is wrapped by the error of removing an image that a sandbox
// has mounted.
var ErrInUse = errors.New("image in use")

// Option configures a Cache.
type Option func(*options)

type options struct {
	maxSize     int64
	maxFiles    int
	idShift     int
	pullTimeout time.Duration
	log         *slog.Logger
}

// WithMaxSize bounds the bytes of file data of one image, unpacked.
// Zero means DefaultMaxSize.
func WithMaxSize(n int64) Option { return func(o *options) { o.maxSize = n } }

// WithMaxFiles bounds the entries of one image's layers, all added up.
// Zero means DefaultMaxFiles.
func WithMaxFiles(n int) Option { return func(o *options) { o.maxFiles = n } }

// WithIDShift stores files owned by uid or gid n in an image as owned by
// host id shift+n: give the host uid a sandbox's root maps to. A cache
// directory keeps the shift it was first opened with; opening it with
// another is an error. Zero (the default) stores the image's own ids.
func WithIDShift(shift int) Option { return func(o *options) { o.idShift = shift } }

// WithPullTimeout bounds the pull of a Docker image that is not on the
// host. Zero means 10 minutes; a negative duration never pulls.
func WithPullTimeout(d time.Duration) Option { return func(o *options) { o.pullTimeout = d } }

// WithLogger receives the cache's events: unpacks, pulls, skipped
// entries, removals. Nil discards them.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// Cache is a directory of unpacked images. Its methods are safe for
// concurrent use, and several processes may open the same directory.
type Cache struct {
	dir  string
	opts options

	mu     sync.Mutex
	docker *client.Client // made on first use: OCI layouts need no engine
}

// The cache directory's layout.
const (
	tmpDir    = "tmp"   // unpacking, removing
	locksDir  = "locks" // one lock file per image
	shiftFile = "idshift"
	// setIDFile marks a cache whose images have no set-id bits: images
	// unpacked before untar dropped them are stripped once.
	setIDFile = "no-setid"
	recordExt = ".json"
)

// Open opens the cache in dir, making it if needed, and removes what
// unpacks or removals that crashed left there.
func Open(dir string, opts ...Option) (*Cache, error) {
	c := &Cache{}
	for _, o := range opts {
		o(&c.opts)
	}
	if c.opts.maxSize <= 0 {
		c.opts.maxSize = DefaultMaxSize
	}
	if c.opts.maxFiles <= 0 {
		c.opts.maxFiles = DefaultMaxFiles
	}
	if c.opts.pullTimeout == 0 {
		c.opts.pullTimeout = 10 * time.Minute
	}
	if c.opts.log == nil {
		c.opts.log = slog.New(slog.DiscardHandler)
	}
	if c.opts.idShift < 0 {
		return nil, fmt.Errorf("%w: image cache: negative id shift %d", errdefs.ErrBadInput, c.opts.idShift)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	c.dir = abs
	// Root's alone: no other host user may reach an image's files, which
	// keep their owners' ids (a sandbox's root among them). Providers
	// hand their sandboxes an image by descriptor, never by path.
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	if err := os.Chmod(c.dir, 0o700); err != nil { // made 0711 before
		return nil, fmt.Errorf("image cache: %w", err)
	}
	for _, d := range []string{tmpDir, locksDir} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	if err := c.checkShift(); err != nil {
		return nil, err
	}
	if err := c.stripSetID(); err != nil {
		return nil, err
	}
	c.sweep()
	return c, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// IDShift is the host id that an image's id 0 is stored as.
func (c *Cache) IDShift() int { return c.opts.idShift }

// Close releases the cache's connection to the Docker engine.
func (c *Cache) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.docker != nil {
		err := c.docker.Close()
		c.docker = nil
		return err
	}
	return nil
}

// checkShift records the cache's id shift, or checks it against the one
// recorded: images unpacked for one mapping are wrong for another.
func (c *Cache) checkShift() error {
	p := filepath.Join(c.dir, shiftFile)
	want := strconv.Itoa(c.opts.idShift)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		if err := writeFileAtomic(p, []byte(want+"\n")); err != nil {
			return fmt.Errorf("image cache: %w", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	if got := strings.TrimSpace(string(b)); got != want {
		return fmt.Errorf("%w: image cache %s holds images owned from host id %s, not %s: give each id mapping a cache directory of its own", errdefs.ErrBadInput, c.dir, got, want)
	}
	return nil
}

// RootFS returns the directory holding ref's root filesystem, unpacking
// the image first if it is not in the cache. ref is a Docker image on the
// host's engine (a name or an id), or an OCI image layout: "oci:PATH",
// "oci:PATH:TAG", or a path starting with "/" or "." (PATH:TAG too).
//
// An image that cannot be found is an error wrapping
// errdefs.ErrBadInput that says what to do; so is an image whose layers
// break the rules of the package doc, or its bounds, and then nothing of
// it is left in the cache.
func (c *Cache) RootFS(ctx context.Context, ref string) (string, error) {
	src, err := c.resolve(ctx, ref)
	if err != nil {
		return "", err
	}
	dir := c.imageDir(src.digest)
	if isDir(dir) {
		c.touch(src.digest)
		return dir, nil
	}
	unlock, err := c.lock(ctx, src.digest)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isDir(dir) { // another process unpacked it while we waited
		c.touch(src.digest)
		return dir, nil
	}
	start := time.Now()
	rec, err := c.unpack(ctx, ref, src)
	if err != nil {
		return "", err
	}
	c.opts.log.Info("image unpacked", "image", ref, "digest", src.digest.String(), "bytes", rec.Size, "files", rec.Files, "took", time.Since(start).Round(time.Millisecond))
	return dir, nil
}

// source is an image resolved to its digest, with a way to read its
// layers.
type source struct {
	digest digest.Digest
	// layers opens the image's layers, bottom first: each is an
	// uncompressed tar stream checked as it is read; its reader's Close
	// reports a stream that was not what the image said (a digest that
	// does not match).
	layers func(ctx context.Context, work string) ([]layerOpener, error)
}

type layerOpener func() (io.ReadCloser, error)

// resolve finds what ref names.
func (c *Cache) resolve(ctx context.Context, ref string) (*source, error) {
	if ref == "" || len(ref) > 4096 || strings.ContainsAny(ref, "\x00\n") {
		return nil, fmt.Errorf("%w: image reference %.200q is not valid", errdefs.ErrBadInput, ref)
	}
	if path, tag, ok := ociRef(ref); ok {
		return c.resolveOCI(path, tag)
	}
	return c.resolveDocker(ctx, ref)
}

// record describes an unpacked image, beside its directory.
type record struct {
	Digest   string    `json:"digest"`
	Refs     []string  `json:"refs"`
	Size     int64     `json:"size"`
	Files    int       `json:"files"`
	Unpacked time.Time `json:"unpacked"`
}

// unpack applies src's layers in a directory of tmp and renames it into
// place. The caller holds the image's lock.
func (c *Cache) unpack(ctx context.Context, ref string, src *source) (*record, error) {
	work := filepath.Join(c.dir, tmpDir, tmpName(src.digest))
	if err := os.RemoveAll(work); err != nil { // a crash's leftover
		return nil, err
	}
	if err := os.Mkdir(work, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	root := filepath.Join(work, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chown(root, c.shift(0), c.shift(0)); err != nil {
		return nil, err
	}
	layers, err := src.layers(ctx, work)
	if err != nil {
		return nil, err
	}
	var used untar.Usage
	for i, open := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := c.applyLayer(ref, i, open, root, &used); err != nil {
			return nil, err
		}
	}
	rec := &record{Digest: src.digest.String(), Refs: []string{ref}, Size: used.Bytes, Files: used.Entries, Unpacked: time.Now().UTC()}
	if err := c.writeRecord(rec); err != nil {
		return nil, err
	}
	final := c.imageDir(src.digest)
	if err := os.MkdirAll(filepath.Dir(final), 0o711); err != nil {
		return nil, err
	}
	if err := os.Rename(root, final); err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	return rec, nil
}

func (c *Cache) applyLayer(ref string, i int, open layerOpener, root string, used *untar.Usage) error {
	rc, err := open()
	if err != nil {
		return fmt.Errorf("image %.200q: layer %d: %w", ref, i+1, err)
	}
	r := &layerReader{r: rc}
	err = untar.Extract(r, root, untar.Options{
		Layer:      true,
		Owner:      func(uid, gid int) (int, int) { return c.shift(uid), c.shift(gid) },
		MaxBytes:   max(c.opts.maxSize-used.Bytes, 1),
		MaxEntries: max(c.opts.maxFiles-used.Entries, 1),
		Usage:      used,
		Warn: func(name, reason string) {
			c.opts.log.Warn("image entry skipped", "image", ref, "layer", i+1, "entry", name, "reason", reason)
		},
	})
	if err == nil {
		// Read to the end: a layer's digest covers its padding too.
		_, err = io.Copy(io.Discard, r)
	}
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	switch {
	case err == nil:
		return nil
	case r.err != nil:
		// What the layer's stream is made of (compression, digest) is
		// the image's fault, whoever noticed it.
		return fmt.Errorf("%w: image %.200q: layer %d: %v", errdefs.ErrBadInput, ref, i+1, unwrapBadInput(r.err))
	case errors.Is(err, untar.ErrLimit):
		return fmt.Errorf("%w: image %.200q: layer %d: %v (image cache bounds: %d bytes, %d files)", errdefs.ErrBadInput, ref, i+1, err, c.opts.maxSize, c.opts.maxFiles)
	case errors.Is(err, untar.ErrBadArchive), errors.Is(err, errdefs.ErrBadInput):
		return fmt.Errorf("%w: image %.200q: layer %d: %v", errdefs.ErrBadInput, ref, i+1, unwrapBadInput(err))
	}
	return fmt.Errorf("image %.200q: layer %d: %w", ref, i+1, err)
}

// layerReader keeps the first error reading a layer gave.
type layerReader struct {
	r   io.Reader
	err error
}

func (l *layerReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if err != nil && err != io.EOF && l.err == nil {
		l.err = err
	}
	return n, err
}

// unwrapBadInput drops a leading "bad input: " that a wrapped error
// would repeat.
func unwrapBadInput(err error) string {
	return strings.TrimPrefix(err.Error(), errdefs.ErrBadInput.Error()+": ")
}

// shift maps an image's uid or gid to the host's.
func (c *Cache) shift(id int) int {
	if id < 0 || id >= IDRange {
		id = overflowID
	}
	return c.opts.idShift + id
}

func (c *Cache) imageDir(d digest.Digest) string {
	return filepath.Join(c.dir, string(d.Algorithm()), d.Encoded())
}

func (c *Cache) recordPath(d digest.Digest) string { return c.imageDir(d) + recordExt }

func tmpName(d digest.Digest) string { return string(d.Algorithm()) + "-" + d.Encoded() }

func (c *Cache) writeRecord(rec *record) error {
	d := digest.Digest(rec.Digest)
	if old, err := c.readRecord(d); err == nil && isDir(c.imageDir(d)) {
		rec.Refs = mergeRefs(old.Refs, rec.Refs)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.recordPath(d)), 0o711); err != nil {
		return err
	}
	return writeFileAtomic(c.recordPath(d), b)
}

func (c *Cache) readRecord(d digest.Digest) (*record, error) {
	b, err := os.ReadFile(c.recordPath(d))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("image cache: record of %s: %w", d, err)
	}
	return &rec, nil
}

// touch notes that an image was just used, for Prune's grace period.
func (c *Cache) touch(d digest.Digest) {
	now := time.Now()
	_ = os.Chtimes(c.recordPath(d), now, now)
}

func mergeRefs(a, b []string) []string {
	out := append([]string(nil), a...)
	for _, r := range b {
		found := false
		for _, o := range out {
			found = found || o == r
		}
		if !found {
			out = append(out, r)
		}
	}
	return out
}

// lock takes the image's lock, shared by every process on the host,
// waiting for it as long as ctx allows.
func (c *Cache) lock(ctx context.Context, d digest.Digest) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(c.dir, locksDir, tmpName(d)), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image cache: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK && err != unix.EINTR {
			f.Close()
			return nil, fmt.Errorf("image cache: lock %s: %w", d, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// tryLock takes the image's lock if no one holds it.
func (c *Cache) tryLock(name string) (unlock func(), ok bool) {
	f, err := os.OpenFile(filepath.Join(c.dir, locksDir, name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}

// sweep removes what crashed unpacks and removals left in tmp: the
// entries of images whose lock no one holds.
func (c *Cache) sweep() {
	entries, err := os.ReadDir(filepath.Join(c.dir, tmpDir))
	if err != nil {
		return
	}
	for _, e := range entries {
		name, _, _ := strings.Cut(e.Name(), ".")
		unlock, ok := c.tryLock(name)
		if !ok {
			continue
		}
		p := filepath.Join(c.dir, tmpDir, e.Name())
		if err := os.RemoveAll(p); err != nil {
			c.opts.log.Warn("image cache: remove a leftover", "path", p, "err", err)
		} else {
			c.opts.log.Info("image cache: removed a leftover", "path", p)
		}
		unlock()
	}
}

// stripSetID removes the set-user-id and set-group-id bits that images
// unpacked by an older berth kept, once per cache.
func (c *Cache) stripSetID() error {
	mark := filepath.Join(c.dir, setIDFile)
	if _, err := os.Stat(mark); err == nil {
		return nil
	}
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() || e.Name() == tmpDir || e.Name() == locksDir {
			continue
		}
		err := filepath.WalkDir(filepath.Join(c.dir, e.Name()), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&^fs.ModeDir != 0 { // links are not followed
				return err
			}
			fi, err := d.Info()
			if err != nil || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) == 0 {
				return err
			}
			return os.Chmod(p, fi.Mode()&(fs.ModePerm|fs.ModeSticky))
		})
		if err != nil {
			return fmt.Errorf("image cache: strip set-id bits: %w", err)
		}
	}
	if err := writeFileAtomic(mark, nil); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	return nil
}

func isDir(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.IsDir()
}

func writeFileAtomic(p string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
