package transfer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"gocloud.dev/blob"
)

// Sizes of what travels, and how streams are cut.
const (
	// DefaultPartSize is the size of the parts streams are stored in.
	DefaultPartSize = 1 << 20
	// DefaultInlineCap is how much of each output stream a result
	// carries inline: its head and tail, half each.
	DefaultInlineCap = 256 << 10
	// MaxInlineFiles bounds the file contents one WriteFiles carries
	// through workflow history.
	MaxInlineFiles = 2 << 20
	// DefaultMaxOutput is how much of each output stream of a command is
	// stored by default: a command that prints more keeps its first
	// bytes and its last (OutputTail), and the result says how many were
	// dropped between them.
	DefaultMaxOutput = 256 << 20
	// OutputTail is how much of the end of a stream past its cap is kept.
	OutputTail = 1 << 20
	// MaxChunk is the most one relay query carries: below the size
	// (512 KiB) past which the SDK and the server log a warning for each
	// payload, with room for the envelope.
	MaxChunk = 500 << 10
)

// DefaultOutputRetention is how long what a sandbox stored in the blob
// store (its commands' outputs, files read, exports) is kept after its
// owner workflow closed: long enough to read a finished run's output.
const DefaultOutputRetention = 24 * time.Hour

// Key prefixes in the blob store.
const (
	Outputs = "outputs/" // commands' output streams
	Files   = "files/"   // files read from sandboxes, too big to travel inline
	Exports = "exports/" // archives of workspace paths, fetched by front ends
	Uploads = "uploads/" // archives front ends store for a sandbox to import
)

// Output is a stream of bytes as a result carries it: inline when small,
// otherwise its head and tail inline and the whole in the blob store.
type Output struct {
	// Inline holds the whole stream, or when Truncated its head
	// (Inline[:HeadLen]) followed by its tail.
	Inline  []byte `json:"inline,omitempty"`
	HeadLen int    `json:"head_len"`
	// Size is the length of the whole stream.
	Size      int64 `json:"size"`
	Truncated bool  `json:"truncated,omitempty"`
	// Blob and Parts locate the whole in the blob store; see Open.
	Blob  string `json:"blob,omitempty"`
	Parts int    `json:"parts,omitempty"`
	// Incomplete: bytes the sandbox produced and did not keep are
	// missing from the stored whole (see Dropped).
	Incomplete bool `json:"incomplete,omitempty"`
	// Dropped counts the bytes missing from the stored whole, between
	// its head and its tail: what the sandbox did not keep while no
	// worker was attached, or what went past a command's output cap.
	Dropped int64 `json:"dropped,omitempty"`
}

// Head is the start of the stream as carried inline.
func (o Output) Head() []byte { return o.Inline[:o.HeadLen] }

// Tail is the end of the stream as carried inline (empty unless
// Truncated).
func (o Output) Tail() []byte { return o.Inline[o.HeadLen:] }

// Whole says whether the stream can be had whole: inline, or stored.
func (o Output) Whole() bool { return !o.Incomplete && (!o.Truncated || o.Blob != "") }

// Open reads the whole of an output, from the blob store when needed.
func Open(ctx context.Context, bucket *blob.Bucket, o Output) (io.ReadCloser, error) {
	if o.Blob == "" {
		return io.NopCloser(bytes.NewReader(o.Inline)), nil
	}
	ctx, cancel := context.WithCancel(ctx)
	return &partReader{ctx: ctx, cancel: cancel, bucket: bucket, key: o.Blob, parts: o.Parts}, nil
}

// PartKey names part i of a stored stream.
func PartKey(key string, i int) string { return fmt.Sprintf("%s/%06d", key, i) }

// PartialKey names the object holding what a writer has written of part
// i so far. It is rewritten as the part grows, and removed when the part
// is complete.
func PartialKey(key string, i int) string { return PartKey(key, i) + ".partial" }

// OutputKey is where the output stream ("stdout" or "stderr") of command
// execID in sandbox sandboxID is stored.
func OutputKey(sandboxID, execID, stream string) string {
	return Outputs + sandboxID + "/" + execID + "/" + stream
}

// SandboxPrefixes are the prefixes of what belongs to one sandbox in the
// blob store, outside its snapshots: deleted with it, or after it.
func SandboxPrefixes(sandboxID string) []string {
	var ps []string
	for _, p := range []string{Outputs, Files, Exports, Uploads} {
		ps = append(ps, p+sandboxID+"/")
	}
	return ps
}

// ValidKey refuses keys that could name something else than a stream
// under one of prefixes.
func ValidKey(key string, prefixes ...string) error {
	if strings.Contains(key, "..") || strings.Contains(key, "//") || strings.HasSuffix(key, "/") || strings.ContainsAny(key, "\\\x00") {
		return fmt.Errorf("transfer: bad key %q", key)
	}
	for _, p := range prefixes {
		if strings.HasPrefix(key, p) && len(key) > len(p) {
			return nil
		}
	}
	return fmt.Errorf("transfer: key %q is not under %s", key, strings.Join(prefixes, ", "))
}

// CheckUpload refuses a key that does not name an upload: an import must
// not read outputs or snapshots into a sandbox.
func CheckUpload(key string) error { return ValidKey(key, Uploads) }

// ReadAhead is how many parts a reader of a stored stream (Open) fetches
// at once, ahead of what is read: a store's round trip per part (an S3
// GET, tens of milliseconds) is mostly waiting, and one after another they
// bound an import to a part per round trip. What is fetched ahead is
// held in memory: at most ReadAhead parts of at most MaxReadAhead bytes
// each; a larger part is read as a stream, in its turn.
const (
	ReadAhead    = 4
	MaxReadAhead = 8 << 20
)

// partReader reads the parts of a stored stream in order, fetching up to
// ReadAhead of them at once.
type partReader struct {
	ctx    context.Context
	cancel context.CancelFunc
	bucket *blob.Bucket
	key    string
	parts  int
	next   int // the next part to fetch
	ahead  []chan fetched
	buf    []byte       // what is left of the part being read, fetched whole
	cur    *blob.Reader // or the part being read, as a stream
	err    error
}

// fetched is a part fetched ahead: whole in b, or open in r when larger
// than MaxReadAhead.
type fetched struct {
	b   []byte
	r   *blob.Reader
	err error
}

func (r *partReader) fetch(i int) chan fetched {
	ch := make(chan fetched, 1) // the fetch never waits for its reader
	go func() {
		br, err := r.bucket.NewReader(r.ctx, PartKey(r.key, i), nil)
		if err != nil {
			ch <- fetched{err: err}
			return
		}
		if br.Size() > MaxReadAhead {
			ch <- fetched{r: br}
			return
		}
		b := make([]byte, 0, max(br.Size(), 0))
		b, err = readAll(io.LimitReader(br, br.Size()), b)
		br.Close()
		ch <- fetched{b: b, err: err}
	}()
	return ch
}

// readAll reads r to its end into b, whose capacity is r's size.
func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

func (r *partReader) Read(p []byte) (int, error) {
	for {
		if r.err != nil {
			return 0, r.err
		}
		if len(r.buf) > 0 {
			n := copy(p, r.buf)
			r.buf = r.buf[n:]
			return n, nil
		}
		if r.cur != nil {
			n, err := r.cur.Read(p)
			if err == io.EOF {
				r.cur.Close()
				r.cur = nil
				if n > 0 {
					return n, nil
				}
				continue
			}
			return n, err
		}
		for len(r.ahead) < ReadAhead && r.next < r.parts {
			r.ahead = append(r.ahead, r.fetch(r.next))
			r.next++
		}
		if len(r.ahead) == 0 {
			return 0, io.EOF
		}
		f := <-r.ahead[0]
		r.ahead = r.ahead[1:]
		if f.err != nil {
			r.err = f.err
			return 0, f.err
		}
		r.buf, r.cur = f.b, f.r
	}
}

// Close stops the fetches under way and waits for them.
func (r *partReader) Close() error {
	r.cancel()
	for _, ch := range r.ahead {
		if f := <-ch; f.r != nil {
			f.r.Close()
		}
	}
	r.ahead = nil
	if r.cur != nil {
		return r.cur.Close()
	}
	return nil
}
