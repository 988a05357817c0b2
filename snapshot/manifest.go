package snapshot

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/berth-dev/berth/provider"
)

// formatVersion is written in every manifest header. A reader refuses
// versions it does not know rather than misread them.
const formatVersion = 1

// Bounds on what is read back from the bucket, so that a hostile or
// damaged object cannot make a reader allocate without limit. They are
// well above what this package writes (chunks of at most chunkSize,
// manifests of about 100 bytes per entry).
const (
	maxChunkSize    = 8 << 20
	maxManifestSize = 1 << 30
	maxEntries      = 4 << 20
	maxPathLen      = provider.MaxPathLen
)

// hash is the SHA-256 of a chunk's or a file's uncompressed bytes. Chunk
// keys name it in 64 lowercase hex digits.
type hash [sha256.Size]byte

func (h hash) String() string { return hex.EncodeToString(h[:]) }

// parseHash accepts exactly the form String writes, so that one hash has
// one name in the bucket.
func parseHash(s string) (hash, error) {
	var h hash
	if len(s) != hex.EncodedLen(len(h)) || strings.ToLower(s) != s {
		return h, fmt.Errorf("bad hash %q", truncate(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("bad hash %q", truncate(s))
	}
	return h, nil
}

// entryType is the kind of a tree entry, as written in manifests.
type entryType string

const (
	typeFile     entryType = "file"
	typeDir      entryType = "dir"
	typeSymlink  entryType = "symlink"
	typeHardlink entryType = "hardlink"
)

// ref locates part of a file's bytes: Len bytes at Off in the chunk Hash.
// A large file is a list of whole chunks; a small one is a slice of a
// chunk packed with other small files. A ref whose Hash is all zeros is
// a hole: Len zero bytes that no chunk holds (no data has that SHA-256),
// so sparse files and runs of zeros cost nothing to save or restore. A
// hole is one ref however long it is.
type ref struct {
	Hash hash
	Off  int64
	Len  int64
}

func (r *ref) hole() bool { return r.Hash == hash{} }

// entry is one path of the tree.
type entry struct {
	Path  string
	Type  entryType
	Mode  int64 // permission bits, setuid, setgid and sticky
	MTime int64 // nanoseconds since the Unix epoch
	// Size is the length of a regular file's contents.
	Size int64
	// Target is where a symbolic link points, or the path of the earlier
	// regular file a hard link shares its contents with.
	Target string
	// Sum is the hash of a packed small file's contents, so that a later
	// save finds the file again without knowing which pack holds it.
	Sum *hash
	// Chunks hold a regular file's contents, in order.
	Chunks []*ref
}

// header is a manifest's first line, in JSON.
type header struct {
	Version int               `json:"version"`
	ID      string            `json:"id"`
	Kind    Kind              `json:"kind"`
	Created time.Time         `json:"created"`
	Started time.Time         `json:"started"`
	Labels  map[string]string `json:"labels,omitempty"`
	Parent  string            `json:"parent,omitempty"`
	Source  string            `json:"source,omitempty"`
	Entries int               `json:"entries"`
	Files   int               `json:"files"`
	Size    int64
	Stored  int64 `json:"stored"`
	Skipped int   `json:"skipped,omitempty"`
}

func (h *header) info() Info {
	return Info{
		ID:      h.ID,
		Kind:    h.Kind,
		Created: h.Created,
		Labels:  h.Labels,
		Files:   h.Files,
		Size:    h.Size,
		Stored:  h.Stored,
		Parent:  h.Parent,
		Source:  h.Source,
		Skipped: h.Skipped,
	}
}

// manifest is a whole snapshot description.
type manifest struct {
	header
	entries []*entry
}

func manifestKey(id string) string { return "manifests/" + id }

// headerLimit bounds a manifest's header line: labels are at most 64 of
// 384 bytes, which JSON escaping may make six times longer.
const headerLimit = 256 << 10

// encodeManifest writes m zstd-compressed: the header as a line of JSON,
// then the entries (see entries.go).
func encodeManifest(m *manifest) ([]byte, error) {
	hdr, err := json.Marshal(&m.header)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	b := append(hdr, '\n')
	prev := ""
	for _, e := range m.entries {
		b = appendEntry(b, prev, e)
		prev = e.Path
		if len(b) >= 64<<10 {
			if _, err := zw.Write(b); err != nil {
				return nil, err
			}
			b = b[:0]
		}
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// manifestReader decodes a manifest stream, header first, checking
// everything it returns.
type manifestReader struct {
	id    string
	zr    *zstd.Decoder
	lim   *io.LimitedReader
	dec   entryDecoder
	check checker
	hdr   header
	n     int // entries read
}

func newManifestReader(id string, r io.Reader) (*manifestReader, error) {
	// The window bound keeps a hostile frame from making the decoder
	// allocate much; what it decodes is bounded by lim. Manifests are
	// written with zstd's default 8 MiB window.
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(16<<20))
	if err != nil {
		return nil, err
	}
	mr := &manifestReader{id: id, zr: zr, lim: &io.LimitedReader{R: zr, N: maxManifestSize + 1}}
	mr.dec.r = bufio.NewReaderSize(mr.lim, headerLimit)
	line, err := mr.dec.r.ReadSlice('\n')
	if err == nil {
		err = json.Unmarshal(line, &mr.hdr)
	}
	if err != nil {
		zr.Close()
		return nil, mr.corrupt("header: %v", mr.limitErr(err))
	}
	if err := mr.checkHeader(); err != nil {
		zr.Close()
		return nil, err
	}
	return mr, nil
}

func (mr *manifestReader) Close() { mr.zr.Close() }

func (mr *manifestReader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: manifest %s: %s", ErrCorrupt, mr.id, fmt.Sprintf(format, args...))
}

// limitErr names the size limit when it is why decoding failed.
func (mr *manifestReader) limitErr(err error) error {
	if mr.lim.N <= 0 {
		return fmt.Errorf("larger than %d bytes", maxManifestSize)
	}
	return err
}

func (mr *manifestReader) checkHeader() error {
	h := &mr.hdr
	switch {
	case h.Version != formatVersion:
		return mr.corrupt("format version %d, want %d", h.Version, formatVersion)
	case h.ID != mr.id:
		return mr.corrupt("names itself %q", truncate(h.ID))
	case h.Kind != KindUser && h.Kind != KindCheckpoint:
		return mr.corrupt("unknown kind %q", truncate(string(h.Kind)))
	case h.Entries < 0 || h.Entries > maxEntries:
		return mr.corrupt("%d entries", h.Entries)
	case h.Parent != "" && provider.ValidateID(h.Parent) != nil:
		return mr.corrupt("bad parent id %q", truncate(h.Parent))
	}
	if err := provider.ValidateLabels(h.Labels); err != nil {
		return mr.corrupt("%v", err)
	}
	return nil
}

// next returns the next entry, or io.EOF after the last one the header
// announced.
func (mr *manifestReader) next() (*entry, error) {
	if mr.n == mr.hdr.Entries {
		if _, err := mr.dec.r.Peek(1); err != io.EOF {
			return nil, mr.corrupt("more than the %d entries announced", mr.hdr.Entries)
		}
		return nil, io.EOF
	}
	e, err := mr.dec.decode()
	if err == errNoEntry {
		err = fmt.Errorf("%d entries, %d announced", mr.n, mr.hdr.Entries)
	}
	if err != nil {
		return nil, mr.corrupt("entry %d: %v", mr.n, mr.limitErr(err))
	}
	mr.n++
	if err := mr.check.add(e); err != nil {
		return nil, mr.corrupt("%v", err)
	}
	return e, nil
}

// readAll reads every entry and checks the totals against the header.
func (mr *manifestReader) readAll() (*manifest, error) {
	m := &manifest{header: mr.hdr, entries: make([]*entry, 0, mr.hdr.Entries)}
	for {
		e, err := mr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		m.entries = append(m.entries, e)
	}
	if mr.check.files != m.Files || mr.check.size != m.Size {
		return nil, mr.corrupt("header says %d files of %d bytes, entries hold %d of %d", m.Files, m.Size, mr.check.files, mr.check.size)
	}
	return m, nil
}

// errPathTooLong: a path longer than a snapshot carries. Save leaves
// such paths out rather than fail (see Info.Skipped).
var errPathTooLong = errors.New("path too long")

// checker checks entries one at a time, in order, for a tree that can be
// unpacked: canonical relative paths, each once, no entry below one that
// is not a directory, hard links to earlier regular files, and contents
// that add up. Save runs it on what a source sends, and readers on what
// the bucket returns.
type checker struct {
	seen  map[string]entryType // every path so far, and the directories they imply
	files int
	size  int64
}

// typeImplied marks a directory no entry names but some entry is inside.
const typeImplied entryType = ""

func (c *checker) add(e *entry) error {
	if c.seen == nil {
		c.seen = make(map[string]entryType)
	}
	if len(c.seen) >= maxEntries {
		return fmt.Errorf("more than %d entries", maxEntries)
	}
	if err := checkPath(e.Path); err != nil {
		return err
	}
	if e.Mode < 0 || e.Mode > 0o7777 {
		return fmt.Errorf("%q: bad mode %o", e.Path, e.Mode)
	}
	if prev, ok := c.seen[e.Path]; ok && !(prev == typeImplied && e.Type == typeDir) {
		return fmt.Errorf("%q: appears twice, or below a file", e.Path)
	}
	// Every ancestor must be a directory; record the unnamed ones as
	// implied, so that a later entry cannot turn one into a file.
	for dir := path.Dir(e.Path); dir != "."; dir = path.Dir(dir) {
		t, ok := c.seen[dir]
		if ok && t != typeDir && t != typeImplied {
			return fmt.Errorf("%q: inside %q, which is a %s", e.Path, dir, t)
		}
		if ok {
			break // its own ancestors were checked when it was added
		}
		c.seen[dir] = typeImplied
	}
	if err := c.checkContents(e); err != nil {
		return fmt.Errorf("%q: %w", e.Path, err)
	}
	c.seen[e.Path] = e.Type
	return nil
}

func (c *checker) checkContents(e *entry) error {
	if e.Type != typeFile && (e.Size != 0 || e.Sum != nil || len(e.Chunks) != 0) {
		return fmt.Errorf("a %s with contents", e.Type)
	}
	if e.Type != typeSymlink && e.Type != typeHardlink && e.Target != "" {
		return fmt.Errorf("a %s with a link target", e.Type)
	}
	switch e.Type {
	case typeDir:
	case typeFile:
		var total int64
		for _, r := range e.Chunks {
			// A hole may be of any length: one reference for a hole
			// of terabytes, not one per chunk it spans.
			if r == nil || r.Off < 0 || r.Len <= 0 || r.Len > math.MaxInt64-total ||
				r.hole() && r.Off != 0 ||
				!r.hole() && (r.Off > maxChunkSize || r.Len > maxChunkSize-r.Off) {
				return errors.New("bad chunk reference")
			}
			total += r.Len
		}
		if total != e.Size {
			return fmt.Errorf("size %d, chunks hold %d bytes", e.Size, total)
		}
		if e.Size > math.MaxInt64-c.size {
			return errors.New("the files' sizes add up past what a snapshot holds")
		}
		c.files++
		c.size += e.Size
	case typeSymlink:
		if e.Target == "" || len(e.Target) > maxPathLen || strings.IndexByte(e.Target, 0) >= 0 {
			return errors.New("bad symbolic link target")
		}
	case typeHardlink:
		if err := checkPath(e.Target); err != nil {
			return fmt.Errorf("hard link: %w", err)
		}
		if c.seen[e.Target] != typeFile {
			return fmt.Errorf("hard link to %q, which is not an earlier regular file", truncate(e.Target))
		}
	default:
		return fmt.Errorf("unknown type %q", truncate(string(e.Type)))
	}
	return nil
}

// checkPath accepts only a path in its one canonical form: relative,
// slash-separated, no empty, "." or ".." element, no NUL. Anything else
// would unpack somewhere other than it says, or not at all. Names are
// bytes, as the kernel keeps them: one that is not UTF-8 is carried as it
// is (manifest entries are binary, not JSON).
func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("bad path %q", truncate(p))
	case len(p) > maxPathLen:
		return fmt.Errorf("%w: %d bytes, more than %d", errPathTooLong, len(p), maxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("path %q holds a NUL", truncate(p))
	case path.IsAbs(p):
		return fmt.Errorf("absolute path %q", truncate(p))
	case provider.Escapes(p) || strings.HasSuffix(p, "/..") || strings.Contains(p, "/../"):
		return fmt.Errorf("path %q leaves the workspace", truncate(p))
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not in canonical form", truncate(p))
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
