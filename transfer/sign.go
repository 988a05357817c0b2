package transfer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

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

func notSignable() error {
	return temporal.NewNonRetryableApplicationError("transfer: the worker's blob store signs no URLs: use the relay", NotSignable, nil)
}

// signQuery answers QuerySign.
func (i *relayInbound) signQuery(ctx workflow.Context, in *interceptor.HandleQueryInput) (any, error) {
	if !i.relay.limits.Sign {
		return nil, notSignable()
	}
	req, ok := arg[SignRequest](in.Args, 0)
	if !ok {
		return nil, badInput("transfer: a signing takes a SignRequest")
	}
	if req.First < 0 || req.Count <= 0 || req.Count > MaxSignParts || len(req.Sizes) > 0 {
		return nil, badInput(fmt.Sprintf("transfer: a read signing is for 1 to %d parts from a part number of 0 or more", MaxSignParts))
	}
	served, err := i.served(ctx)
	if err != nil {
		return nil, err
	}
	if err := served.reads(req.Key, workflow.GetInfo(ctx).WorkflowExecution.ID); err != nil {
		return nil, err
	}
	c, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	return i.relay.sign(c, req.Key, req.First, make([]int64, req.Count), http.MethodGet)
}

// signPut does the work of UpdateSign: it reserves the parts' sizes
// against the workflow's upload bounds, as a write would, until the URLs
// expire, and signs a PUT of each part of exactly its size.
func (i *relayInbound) signPut(ctx context.Context, s Served, workflowID string, req SignRequest) (SignedURLs, error) {
	if !i.relay.limits.Sign {
		return SignedURLs{}, notSignable()
	}
	prefix, err := s.upload(req.Key, workflowID)
	if err != nil {
		return SignedURLs{}, err
	}
	lim := i.relay.limits
	if len(req.Sizes) == 0 || len(req.Sizes) > MaxSignParts || req.Count != 0 {
		return SignedURLs{}, badInput(fmt.Sprintf("transfer: a write signing is for 1 to %d parts, one size each", MaxSignParts))
	}
	for j, n := range req.Sizes {
		part := req.First + j
		if req.First < 0 || part >= lim.UploadParts || n < 0 || n > MaxChunk {
			return SignedURLs{}, badInput(fmt.Sprintf("transfer: part %d of %d bytes: parts are numbered from 0 to %d and hold at most %d bytes",
				part, n, lim.UploadParts-1, MaxChunk))
		}
	}
	keys := make([]string, len(req.Sizes))
	for j := range keys {
		keys[j] = PartKey(req.Key, req.First+j)
	}
	if err := i.reserve(ctx, prefix, keys, req.Sizes); err != nil {
		return SignedURLs{}, err
	}
	urls, err := i.relay.sign(ctx, req.Key, req.First, req.Sizes, http.MethodPut)
	if err != nil {
		return SignedURLs{}, err
	}
	// Counted from before the URLs are good to after they no longer are.
	for j, k := range keys {
		i.uploads.sign(k, req.Sizes[j], urls.Expires.Add(time.Second))
	}
	return urls, nil
}

// sign signs a URL of each part from first on; for a PUT, with the size
// of the part in sizes as its Content-Length, which the store holds the
// request to (it is a signed header).
func (r *relay) sign(ctx context.Context, key string, first int, sizes []int64, method string) (SignedURLs, error) {
	expiry := r.limits.SignExpiry
	out := SignedURLs{PartSize: r.limits.PartSize}
	if method == http.MethodPut {
		expiry, out.PartSize = r.limits.PutExpiry, MaxChunk
	}
	out.Expires = time.Now().Add(expiry)
	for j, n := range sizes {
		opts := &blob.SignedURLOptions{Method: method, Expiry: expiry}
		if method == http.MethodPut {
			opts.BeforeSign = func(as func(any) bool) error {
				var in *s3.PutObjectInput
				if !as(&in) {
					// A store whose PUT cannot be held to a size is not
					// signed for: the bounds would not hold.
					return errUnbounded
				}
				in.ContentLength = aws.Int64(n)
				return nil
			}
		}
		u, err := r.bucket.SignedURL(ctx, PartKey(key, first+j), opts)
		if gcerrors.Code(err) == gcerrors.Unimplemented || errors.Is(err, errUnbounded) {
			return SignedURLs{}, notSignable()
		}
		if err != nil {
			return SignedURLs{}, storeFailed(fmt.Errorf("transfer: sign %s: %w", PartKey(key, first+j), err))
		}
		out.URLs = append(out.URLs, u)
	}
	return out, nil
}

var errUnbounded = errors.New("transfer: the store's signed PUT cannot be held to a size")
