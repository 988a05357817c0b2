package relay

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

	"github.com/berth-dev/berth/transfer"
)

func notSignable() error {
	return temporal.NewNonRetryableApplicationError("transfer: the worker's blob store signs no URLs: use the relay", transfer.NotSignable, nil)
}

// signQuery answers transfer.QuerySign.
func (i *relayInbound) signQuery(ctx workflow.Context, in *interceptor.HandleQueryInput) (any, error) {
	if !i.relay.limits.Sign {
		return nil, notSignable()
	}
	req, ok := arg[transfer.SignRequest](in.Args, 0)
	if !ok {
		return nil, badInput("transfer: a signing takes a transfer.SignRequest")
	}
	if req.First < 0 || req.Count <= 0 || req.Count > transfer.MaxSignParts || len(req.Sizes) > 0 {
		return nil, badInput(fmt.Sprintf("transfer: a read signing is for 1 to %d parts from a part number of 0 or more", transfer.MaxSignParts))
	}
	served, err := i.served(ctx)
	if err != nil {
		return nil, err
	}
	if err := reads(served, req.Key, workflow.GetInfo(ctx).WorkflowExecution.ID); err != nil {
		return nil, err
	}
	c, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	return i.relay.sign(c, req.Key, req.First, make([]int64, req.Count), http.MethodGet)
}

// signPut does the work of transfer.UpdateSign: it reserves the parts' sizes
// against the workflow's upload bounds, as a write would, until the URLs
// expire, and signs a PUT of each part of exactly its size.
func (i *relayInbound) signPut(ctx context.Context, s transfer.Served, workflowID string, req transfer.SignRequest) (transfer.SignedURLs, error) {
	if !i.relay.limits.Sign {
		return transfer.SignedURLs{}, notSignable()
	}
	prefix, err := upload(s, req.Key, workflowID)
	if err != nil {
		return transfer.SignedURLs{}, err
	}
	lim := i.relay.limits
	if len(req.Sizes) == 0 || len(req.Sizes) > transfer.MaxSignParts || req.Count != 0 {
		return transfer.SignedURLs{}, badInput(fmt.Sprintf("transfer: a write signing is for 1 to %d parts, one size each", transfer.MaxSignParts))
	}
	for j, n := range req.Sizes {
		part := req.First + j
		if req.First < 0 || part >= lim.UploadParts || n < 0 || n > transfer.MaxChunk {
			return transfer.SignedURLs{}, badInput(fmt.Sprintf("transfer: part %d of %d bytes: parts are numbered from 0 to %d and hold at most %d bytes",
				part, n, lim.UploadParts-1, transfer.MaxChunk))
		}
	}
	keys := make([]string, len(req.Sizes))
	for j := range keys {
		keys[j] = transfer.PartKey(req.Key, req.First+j)
	}
	if err := i.reserve(ctx, prefix, keys, req.Sizes); err != nil {
		return transfer.SignedURLs{}, err
	}
	urls, err := i.relay.sign(ctx, req.Key, req.First, req.Sizes, http.MethodPut)
	if err != nil {
		return transfer.SignedURLs{}, err
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
func (r *relay) sign(ctx context.Context, key string, first int, sizes []int64, method string) (transfer.SignedURLs, error) {
	expiry := r.limits.SignExpiry
	out := transfer.SignedURLs{PartSize: r.limits.PartSize}
	if method == http.MethodPut {
		expiry, out.PartSize = r.limits.PutExpiry, transfer.MaxChunk
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
		u, err := r.bucket.SignedURL(ctx, transfer.PartKey(key, first+j), opts)
		if gcerrors.Code(err) == gcerrors.Unimplemented || errors.Is(err, errUnbounded) {
			return transfer.SignedURLs{}, notSignable()
		}
		if err != nil {
			return transfer.SignedURLs{}, storeFailed(fmt.Errorf("transfer: sign %s: %w", transfer.PartKey(key, first+j), err))
		}
		out.URLs = append(out.URLs, u)
	}
	return out, nil
}

var errUnbounded = errors.New("transfer: the store's signed PUT cannot be held to a size")
