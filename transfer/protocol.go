package transfer

import (
	"fmt"
	"strings"
	"time"
)

// The relay's protocol: what a front end sends a workflow to read and
// write its streams, and what the relay (package transfer/relay, on the
// worker) answers. It is plain data, so that a program that speaks it or
// reads the format links no Temporal SDK.

// The relay's operations. Reads are a Query; writes and deletes are
// Updates, which Temporal's authorizer counts as writes, and which the
// relay always rejects, with Stored when it did the work: a rejected
// Update writes nothing to history, so the data never enters it.
const (
	QueryRead    = "berth.blob.read"   // ReadRequest -> []byte
	UpdateWrite  = "berth.blob.write"  // WriteRequest, data []byte -> rejected with Stored
	UpdateDelete = "berth.blob.delete" // DeleteRequest -> rejected with Stored
	// QueryServed is the Query a workflow answers, through Serve, with
	// what it owns: the relay asks it before it serves anything.
	QueryServed = "berth.blob.served" // -> Served
)

// Error types of the relay's answers (temporal.ApplicationError types).
const (
	// Stored is the rejection that means success: the part was stored,
	// or the stream deleted.
	Stored = "berth.blob.stored"
	// BadInput: a key the workflow does not own, a malformed request, an
	// upload over its owner's bound. Never worth retrying. It is the
	// same string as errdefs.BadInput.
	BadInput = "BadInput"
	// StoreFailed: the blob store failed; the call may be sent again.
	StoreFailed = "BlobStoreFailed"
)

// ReadRequest asks for at most Max bytes (MaxChunk when zero or more) of
// the stream Key from Offset.
type ReadRequest struct {
	Key    string `json:"key"`
	Offset int64  `json:"offset"`
	Max    int    `json:"max,omitempty"`
}

// The answer to a read is what is stored of the stream from the offset
// asked, as raw bytes (no JSON, no base64): possibly nothing yet, while
// its writer has not got there.

// WriteRequest stores one part of an upload, whose key is under the
// workflow's UploadPrefix. The data is the Update's second argument, so
// that it travels raw. Parts are MaxChunk bytes but the last; writing a
// part again replaces it.
type WriteRequest struct {
	Key  string `json:"key"`
	Part int    `json:"part"`
}

// DeleteRequest removes an export or an upload of the workflow's, every
// part of it there is.
type DeleteRequest struct {
	Key string `json:"key"`
}

// Served is what a workflow serves through the relay.
type Served struct {
	// Prefixes name what is the workflow's own: streams under them (each
	// under Outputs, Files or Exports, and ending with a slash) are read,
	// and its exports deleted.
	Prefixes []string `json:"prefixes"`
	// Uploads says the workflow takes uploads, under UploadPrefix of its
	// workflow id.
	Uploads bool `json:"uploads,omitempty"`
}

// Serve tells the relay what the calling workflow owns: served is asked
// each time a front end reads, writes or deletes through the workflow,
// and reads the workflow's state as it is then (it must not block). A
// workflow that does not call Serve serves nothing. Serve registers the

// session's id (manager/s1) takes uploads too, and no two ids share one.
func UploadPrefix(workflowID string) (string, error) {
	if workflowID == "" {
		return "", fmt.Errorf("transfer: an empty workflow id takes no uploads")
	}
	return Uploads + escapeID(workflowID) + "/", nil
}

// escapeID writes an id as one clean path element: every byte but
// letters, digits, '-', '_' and '.' as %XX, and the dots too when they
// would make a path element of their own or a "..". An id of only safe
// bytes is itself, as it always was; the escaping is undone by
// percent-decoding, so it never maps two ids to one element.
func escapeID(id string) string {
	dots := id == "." || strings.Contains(id, "..")
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '.' && !dots:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Signing lets a front end read and write a stream's parts in the blob
// store itself, with short-lived signed URLs, where the store is one it
// can reach (s3, gs, azblob): the relay then carries the URLs, not the
// bytes. The relay checks a signing as it checks the read or write it
// grants: reads of the workflow's own streams (a Query, QuerySign),
// writes of parts of its own uploads within their bounds (an Update,
// UpdateSign, rejected with Signed, the URLs its details, so that
// nothing enters history). A store that cannot sign (a file store: berth
// dev) answers NotSignable, and the front end uses the relay.
const (
	QuerySign  = "berth.blob.sign"    // SignRequest -> SignedURLs (GET)
	UpdateSign = "berth.blob.signput" // SignRequest -> rejected with Signed, details SignedURLs (PUT)
	// Signed is the rejection of UpdateSign that means success: its
	// details are the SignedURLs.
	Signed = "berth.blob.signed"
	// NotSignable: the worker's blob store signs no URLs; use the relay.
	NotSignable = "berth.blob.notsignable"
)

// Bounds of signing.
const (
	// DefaultSignExpiry is how long a signed GET URL is good for.
	DefaultSignExpiry = 5 * time.Minute
	// DefaultPutExpiry is how long a signed PUT URL is good for: its
	// part counts against the workflow's upload bounds that long, stored,
	// deleted or never sent (a URL cannot be taken back), so it is short.
	// The client sends a part as soon as it is signed.
	DefaultPutExpiry = time.Minute
	// MaxSignParts bounds the URLs of one signing (each about 1 KB).
	MaxSignParts = 64
)

// SignRequest asks for URLs of parts of the stream Key, from part First
// on: Count parts to read (QuerySign), or one part to write of each size
// in Sizes (UpdateSign), the exact size the store will take for it.
type SignRequest struct {
	Key   string  `json:"key"`
	First int     `json:"first"`
	Count int     `json:"count,omitempty"`
	Sizes []int64 `json:"sizes,omitempty"`
}

// SignedURLs are URLs of parts First... of a stream, good until Expires.
// A read is a GET of a part, from PartSize*i on, with a Range header; a
// part that is not there yet (404) is read through the relay, as is the
// part under way. A write is a PUT of exactly the size signed.
type SignedURLs struct {
	PartSize int       `json:"partSize"`
	Expires  time.Time `json:"expires"`
	URLs     []string  `json:"urls"`
}
