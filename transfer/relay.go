package transfer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"
)

// The relay's queries, which every workflow of a worker with Interceptor
// answers.
const (
	QueryRead   = "berth.blob.read"   // ReadRequest -> []byte
	QueryWrite  = "berth.blob.write"  // key string, part int, data []byte -> nothing
	QueryDelete = "berth.blob.delete" // DeleteRequest -> nothing
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
//
// A write stores one part of an upload, the key under Uploads. Its
// arguments are separate, so that the data travels raw too. Parts are
// MaxChunk bytes but the last; writing a part again replaces it.

// DeleteRequest removes the first Parts parts of an export or an upload.
type DeleteRequest struct {
	Key   string `json:"key"`
	Parts int    `json:"parts"`
}

// relayTimeout bounds one query's work on the blob store.
const relayTimeout = 30 * time.Second

// Interceptor gives every workflow of a worker the relay's queries over
// bucket, whose streams are cut in parts of partSize bytes (zero means
// DefaultPartSize).
func Interceptor(bucket *blob.Bucket, partSize int) interceptor.WorkerInterceptor {
	if partSize <= 0 {
		partSize = DefaultPartSize
	}
	return &relay{bucket: bucket, partSize: partSize}
}

type relay struct {
	interceptor.WorkerInterceptorBase
	bucket   *blob.Bucket
	partSize int
}

func (r *relay) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &relayInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, relay: r}
}

type relayInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	relay *relay
}

// ExecuteWorkflow registers the queries before the workflow runs. They
// write no history, and need no workflow state: adding them changes
// nothing a replay sees.
func (i *relayInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	for name, handler := range map[string]any{QueryRead: i.relay.read, QueryWrite: i.relay.write, QueryDelete: i.relay.delete} {
		if err := workflow.SetQueryHandler(ctx, name, handler); err != nil {
			return nil, err
		}
	}
	return i.Next.ExecuteWorkflow(ctx, in)
}

func (r *relay) read(req ReadRequest) ([]byte, error) {
	if err := validKey(req.Key, Outputs, Files, Exports); err != nil {
		return nil, err
	}
	if req.Offset < 0 {
		return nil, errors.New("transfer: negative offset")
	}
	max := req.Max
	if max <= 0 || max > MaxChunk {
		max = MaxChunk
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	b, err := ReadAt(ctx, r.bucket, req.Key, r.partSize, req.Offset, max)
	if err != nil {
		return nil, fmt.Errorf("transfer: read %s at %d: %w", req.Key, req.Offset, err)
	}
	if b == nil {
		b = []byte{} // nil would travel as no payload at all
	}
	return b, nil
}

// write and delete answer true: a query handler must return a value.
func (r *relay) write(key string, part int, data []byte) (bool, error) {
	if err := CheckUpload(key); err != nil {
		return false, err
	}
	if part < 0 || len(data) > MaxChunk {
		return false, fmt.Errorf("transfer: part %d of %d bytes: parts are numbered from 0 and at most %d bytes", part, len(data), MaxChunk)
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	if err := writeObject(ctx, r.bucket, PartKey(key, part), data); err != nil {
		return false, fmt.Errorf("transfer: write part %d of %s: %w", part, key, err)
	}
	return true, nil
}

func (r *relay) delete(req DeleteRequest) (bool, error) {
	if err := validKey(req.Key, Exports, Uploads); err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	return true, DeleteParts(ctx, r.bucket, req.Key, req.Parts)
}

// DeleteParts removes the parts of a stream, and their partial objects.
// Parts already gone are no error.
func DeleteParts(ctx context.Context, bucket *blob.Bucket, key string, parts int) error {
	for i := 0; i <= parts; i++ {
		for _, k := range []string{PartKey(key, i), PartialKey(key, i)} {
			if err := bucket.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return fmt.Errorf("transfer: delete %s: %w", k, err)
			}
		}
	}
	return nil
}
