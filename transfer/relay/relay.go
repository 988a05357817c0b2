package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/berth-dev/berth/transfer"
)

// Query transfer.QueryServed, which changes no history: call it first thing, in
// every run (a run continued as new calls it again).
func Serve(ctx workflow.Context, served func() transfer.Served) error {
	return workflow.SetQueryHandler(ctx, transfer.QueryServed, func() (transfer.Served, error) { return served(), nil })
}

// transfer.UploadPrefix is where the uploads of the workflow workflowID are
// stored: under its id made one path element (escapeID), so that a
// Bounds of the relay, per workflow that takes uploads.
const (
	// DefaultUploadBytes bounds the bytes of the uploads stored for one
	// workflow at a time (deleted when imported, or after
	// activities.TransferMaxAge): a default workspace's size (10 GiB),
	// more than it could unpack.
	DefaultUploadBytes = 10 << 30
	// DefaultUploadParts bounds the objects those uploads are stored in
	// (a full part is transfer.MaxChunk bytes).
	DefaultUploadParts = 32768
	// relayTimeout bounds one operation's work on the blob store: it
	// runs in a workflow task, whose own timeout is 10 s by default.
	relayTimeout = 5 * time.Second
)

// Limits bounds what the relay stores; zero fields mean the defaults.
type Limits struct {
	// PartSize is the size of the parts of the streams the worker
	// stores (transfer.DefaultPartSize).
	PartSize int
	// UploadBytes and UploadParts bound each workflow's uploads
	// (DefaultUploadBytes, DefaultUploadParts).
	UploadBytes int64
	UploadParts int
	// Sign lets front ends have signed URLs of parts (transfer.QuerySign,
	// transfer.UpdateSign): set it for a store front ends can reach themselves. A
	// store that cannot sign answers transfer.NotSignable all the same. GET URLs
	// are good for SignExpiry (transfer.DefaultSignExpiry), PUT URLs for
	// PutExpiry (transfer.DefaultPutExpiry).
	Sign       bool
	SignExpiry time.Duration
	PutExpiry  time.Duration
}

// Interceptor gives every workflow of a worker the relay's operations
// over bucket: each serves what the workflow says it owns (Serve), and
// nothing else.
func Interceptor(bucket *blob.Bucket, limits Limits) interceptor.WorkerInterceptor {
	if limits.PartSize <= 0 {
		limits.PartSize = transfer.DefaultPartSize
	}
	if limits.UploadBytes <= 0 {
		limits.UploadBytes = DefaultUploadBytes
	}
	if limits.UploadParts <= 0 {
		limits.UploadParts = DefaultUploadParts
	}
	if limits.SignExpiry <= 0 {
		limits.SignExpiry = transfer.DefaultSignExpiry
	}
	if limits.PutExpiry <= 0 {
		limits.PutExpiry = transfer.DefaultPutExpiry
	}
	return &relay{bucket: bucket, limits: limits}
}

type relay struct {
	interceptor.WorkerInterceptorBase
	bucket *blob.Bucket
	limits Limits
}

func (r *relay) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &relayInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, relay: r}
}

// relayInbound is the relay of one workflow execution, as a worker
// holds it in its cache.
type relayInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	relay *relay
	// uploads counts what is stored of the workflow's uploads, from a
	// listing when first needed (the relay of a workflow evicted from
	// the cache starts again from one).
	uploads *usage
}

// ExecuteWorkflow registers the relay's operations before the workflow
// runs. The handlers only declare the arguments; HandleQuery and
// ValidateUpdate do the work. None of it writes history: a Query does
// not, nor does an Update rejected by its validator, and validators do
// not run on replay.
func (i *relayInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	if err := workflow.SetQueryHandler(ctx, transfer.QueryRead, func(transfer.ReadRequest) ([]byte, error) {
		return nil, errors.New("transfer: the relay's interceptor answers reads")
	}); err != nil {
		return nil, err
	}
	if err := workflow.SetQueryHandler(ctx, transfer.QuerySign, func(transfer.SignRequest) (transfer.SignedURLs, error) {
		return transfer.SignedURLs{}, errors.New("transfer: the relay's interceptor answers signings")
	}); err != nil {
		return nil, err
	}
	for name, handler := range map[string]any{
		transfer.UpdateWrite:  func(workflow.Context, transfer.WriteRequest, []byte) error { return errNeverAccepted },
		transfer.UpdateDelete: func(workflow.Context, transfer.DeleteRequest) error { return errNeverAccepted },
		transfer.UpdateSign:   func(workflow.Context, transfer.SignRequest) error { return errNeverAccepted },
	} {
		if err := workflow.SetUpdateHandler(ctx, name, handler); err != nil {
			return nil, err
		}
	}
	return i.Next.ExecuteWorkflow(ctx, in)
}

var errNeverAccepted = errors.New("transfer: the relay's updates are never accepted")

func (i *relayInbound) HandleQuery(ctx workflow.Context, in *interceptor.HandleQueryInput) (any, error) {
	if in.QueryType == transfer.QuerySign {
		return i.signQuery(ctx, in)
	}
	if in.QueryType != transfer.QueryRead {
		return i.Next.HandleQuery(ctx, in)
	}
	req, ok := arg[transfer.ReadRequest](in.Args, 0)
	if !ok {
		return nil, badInput("transfer: a read takes a transfer.ReadRequest")
	}
	served, err := i.served(ctx)
	if err != nil {
		return nil, err
	}
	if err := reads(served, req.Key, workflow.GetInfo(ctx).WorkflowExecution.ID); err != nil {
		return nil, err
	}
	return i.relay.read(req)
}

func (i *relayInbound) ValidateUpdate(ctx workflow.Context, in *interceptor.UpdateInput) error {
	var op func(context.Context, transfer.Served, string) error
	switch in.Name {
	case transfer.UpdateWrite:
		req, ok1 := arg[transfer.WriteRequest](in.Args, 0)
		data, ok2 := arg[[]byte](in.Args, 1)
		if !ok1 || !ok2 {
			return badInput("transfer: a write takes a transfer.WriteRequest and the data")
		}
		op = func(ctx context.Context, s transfer.Served, id string) error { return i.write(ctx, s, id, req, data) }
	case transfer.UpdateDelete:
		req, ok := arg[transfer.DeleteRequest](in.Args, 0)
		if !ok {
			return badInput("transfer: a delete takes a transfer.DeleteRequest")
		}
		op = func(ctx context.Context, s transfer.Served, id string) error { return i.delete(ctx, s, id, req.Key) }
	case transfer.UpdateSign:
		req, ok := arg[transfer.SignRequest](in.Args, 0)
		if !ok {
			return badInput("transfer: a signing takes a transfer.SignRequest")
		}
		// Rejected with the URLs: an accepted Update would put them in
		// history, a grant to write for anyone who reads it.
		op = func(ctx context.Context, s transfer.Served, id string) error {
			urls, err := i.signPut(ctx, s, id, req)
			if err != nil {
				return err
			}
			return temporal.NewNonRetryableApplicationError("signed", transfer.Signed, nil, urls)
		}
	default:
		return i.Next.ValidateUpdate(ctx, in)
	}
	served, err := i.served(ctx)
	if err != nil {
		return err
	}
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	err = unblocked(ctx, func() error {
		c, cancel := context.WithTimeout(context.Background(), relayTimeout)
		defer cancel()
		return op(c, served, id)
	})
	if err != nil {
		return err
	}
	return temporal.NewNonRetryableApplicationError("stored", transfer.Stored, nil)
}

// served asks the workflow what it owns.
func (i *relayInbound) served(ctx workflow.Context) (transfer.Served, error) {
	v, err := i.Next.HandleQuery(ctx, &interceptor.HandleQueryInput{QueryType: transfer.QueryServed})
	if err != nil {
		return transfer.Served{}, badInput(fmt.Sprintf("transfer: workflow %s serves no blobs", workflow.GetInfo(ctx).WorkflowExecution.ID))
	}
	s, ok := v.(transfer.Served)
	if !ok {
		return transfer.Served{}, fmt.Errorf("transfer: %s answered %T", transfer.QueryServed, v)
	}
	return s, nil
}

// reads refuses a key that is not a stream under one of s's prefixes.
func reads(s transfer.Served, key, workflowID string) error {
	if err := transfer.ValidKey(key, transfer.Outputs, transfer.Files, transfer.Exports); err != nil {
		return badInput(err.Error())
	}
	if !owns(s, key) {
		return notOwned(key, workflowID)
	}
	return nil
}

func owns(s transfer.Served, key string) bool {
	for _, p := range s.Prefixes {
		if strings.HasSuffix(p, "/") && strings.HasPrefix(key, p) && len(key) > len(p) {
			return true
		}
	}
	return false
}

// upload returns the workflow's upload prefix, and refuses a key that is
// not one upload there: one path element under it.
func upload(s transfer.Served, key, workflowID string) (string, error) {
	prefix, err := transfer.UploadPrefix(workflowID)
	if !s.Uploads || err != nil {
		return "", badInput(fmt.Sprintf("transfer: workflow %s takes no uploads", workflowID))
	}
	if err := transfer.ValidKey(key, transfer.Uploads); err != nil {
		return "", badInput(err.Error())
	}
	name, ok := strings.CutPrefix(key, prefix)
	if !ok || strings.Contains(name, "/") {
		return "", notOwned(key, workflowID)
	}
	return prefix, nil
}

func notOwned(key, workflowID string) error {
	return badInput(fmt.Sprintf("transfer: %q is not workflow %s's: a workflow serves only its own sandbox's, run's or session's blobs", key, workflowID))
}

func badInput(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, transfer.BadInput, nil)
}

func (r *relay) read(req transfer.ReadRequest) ([]byte, error) {
	if req.Offset < 0 {
		return nil, badInput("transfer: negative offset")
	}
	max := req.Max
	if max <= 0 || max > transfer.MaxChunk {
		max = transfer.MaxChunk
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	b, err := transfer.ReadAt(ctx, r.bucket, req.Key, r.limits.PartSize, req.Offset, max)
	if err != nil {
		return nil, fmt.Errorf("transfer: read %s at %d: %w", req.Key, req.Offset, err)
	}
	if b == nil {
		b = []byte{} // nil would travel as no payload at all
	}
	return b, nil
}

func (i *relayInbound) write(ctx context.Context, s transfer.Served, workflowID string, req transfer.WriteRequest, data []byte) error {
	prefix, err := upload(s, req.Key, workflowID)
	if err != nil {
		return err
	}
	lim := i.relay.limits
	if req.Part < 0 || req.Part >= lim.UploadParts || len(data) > transfer.MaxChunk {
		return badInput(fmt.Sprintf("transfer: part %d of %d bytes: parts are numbered from 0 to %d and hold at most %d bytes",
			req.Part, len(data), lim.UploadParts-1, transfer.MaxChunk))
	}
	key := transfer.PartKey(req.Key, req.Part)
	if err := i.reserve(ctx, prefix, []string{key}, []int64{int64(len(data))}); err != nil {
		return err
	}
	if err := transfer.WriteObject(ctx, i.relay.bucket, key, data); err != nil {
		i.uploads = nil // count again: the part may be there, or not
		return storeFailed(fmt.Errorf("transfer: write part %d of %s: %w", req.Part, req.Key, err))
	}
	i.uploads.set(key, int64(len(data)))
	return nil
}

// reserve refuses parts (keys, of sizes) that would take the workflow's
// uploads past their bounds. A count that says so is made again from a
// listing before the parts are refused: the reaper may have removed
// uploads since.
func (i *relayInbound) reserve(ctx context.Context, prefix string, keys []string, sizes []int64) error {
	lim := i.relay.limits
	for fresh := i.uploads == nil; ; fresh = true {
		if fresh {
			u, err := countUploads(ctx, i.relay.bucket, prefix)
			if err != nil {
				return storeFailed(err)
			}
			u.keepSigned(i.uploads)
			i.uploads = u
		}
		bytes, parts := i.uploads.with(keys, sizes)
		if bytes <= lim.UploadBytes && parts <= lim.UploadParts {
			return nil
		}
		if fresh {
			key := keys[0]
			return badInput(fmt.Sprintf("transfer: upload %s: the uploads of a workflow are bounded to %d bytes in %d parts at a time, and this would make %d bytes in %d parts",
				strings.TrimSuffix(key[:strings.LastIndex(key, "/")], "/"), lim.UploadBytes, lim.UploadParts, bytes, parts))
		}
	}
}

func (i *relayInbound) delete(ctx context.Context, s transfer.Served, workflowID, key string) error {
	if strings.HasPrefix(key, transfer.Uploads) {
		if _, err := upload(s, key, workflowID); err != nil {
			return err
		}
	} else {
		if err := transfer.ValidKey(key, transfer.Exports); err != nil {
			return badInput(fmt.Sprintf("transfer: only exports and uploads are deleted: %v", err))
		}
		if !owns(s, key) {
			return notOwned(key, workflowID)
		}
	}
	gone, err := deleteStream(ctx, i.relay.bucket, key)
	for _, k := range gone {
		i.uploads.drop(k)
	}
	if err != nil {
		return storeFailed(err)
	}
	return nil
}

func storeFailed(err error) error {
	return temporal.NewApplicationError(err.Error(), transfer.StoreFailed)
}

// usage is what is stored of a workflow's uploads: each object's size,
// counting each part a PUT is signed for at its signed size until the
// URL expires, stored or not yet.
type usage struct {
	size   map[string]int64
	bytes  int64
	signed map[string]signedPart
}

type signedPart struct {
	size    int64
	expires time.Time
}

// sign counts key at n bytes until expires, whatever a listing says.
func (u *usage) sign(key string, n int64, expires time.Time) {
	if u.signed == nil {
		u.signed = map[string]signedPart{}
	}
	u.signed[key] = signedPart{n, expires}
	if n > u.size[key] {
		u.set(key, n)
	}
}

// keepSigned carries old's unexpired signed parts into u, a fresh count.
func (u *usage) keepSigned(old *usage) {
	if old == nil {
		return
	}
	now := time.Now()
	for k, p := range old.signed {
		if now.Before(p.expires) {
			u.sign(k, p.size, p.expires)
		}
	}
}

func countUploads(ctx context.Context, bucket *blob.Bucket, prefix string) (*usage, error) {
	u := &usage{size: map[string]int64{}}
	it := bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return u, nil
		}
		if err != nil {
			return nil, fmt.Errorf("transfer: list %s: %w", prefix, err)
		}
		if !obj.IsDir {
			u.set(obj.Key, obj.Size)
		}
	}
}

// with is the bytes and objects there would be with each of keys (all
// different) holding its size.
func (u *usage) with(keys []string, sizes []int64) (bytes int64, parts int) {
	bytes, parts = u.bytes, len(u.size)
	for j, k := range keys {
		old, ok := u.size[k]
		if !ok {
			parts++
		}
		bytes += sizes[j] - old
	}
	return bytes, parts
}

func (u *usage) set(key string, n int64) {
	if u == nil {
		return
	}
	u.bytes += n - u.size[key]
	u.size[key] = n
}

func (u *usage) drop(key string) {
	if u == nil {
		return
	}
	if p, ok := u.signed[key]; ok && time.Now().Before(p.expires) {
		return // its URL may store it again
	}
	u.bytes -= u.size[key]
	delete(u.size, key)
}

// deleteStream removes every object of the stream key (its parts and
// partial parts) and says which it removed: what there is, listed, not
// what a caller says there is.
func deleteStream(ctx context.Context, bucket *blob.Bucket, key string) (gone []string, err error) {
	it := bucket.List(&blob.ListOptions{Prefix: key + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return gone, nil
		}
		if err != nil {
			return gone, fmt.Errorf("transfer: list %s: %w", key, err)
		}
		if obj.IsDir {
			continue
		}
		if err := bucket.Delete(ctx, obj.Key); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
			return gone, fmt.Errorf("transfer: delete %s: %w", obj.Key, err)
		}
		gone = append(gone, obj.Key)
	}
}

// arg is the i-th decoded argument of a handler, as its type.
func arg[T any](args []any, i int) (T, bool) {
	var zero T
	if i >= len(args) {
		return zero, false
	}
	v, ok := args[i].(T)
	return v, ok
}

// unblocked runs f, blocking I/O, from a workflow's update validator,
// with the workflow's deadlock detector paused: the SDK would otherwise
// fail the workflow task when f takes over a second (a slow store). The
// SDK pauses it only around its data converter's calls, for converters
// that call out (workflow.DataConverterWithoutDeadlockDetection): f runs
// as one. f's own timeout (relayTimeout) bounds it instead.
func unblocked(ctx workflow.Context, f func() error) error {
	dc := workflow.DataConverterWithoutDeadlockDetection(callConverter{f})
	if aware, ok := dc.(workflow.ContextAware); ok {
		dc = aware.WithWorkflowContext(ctx)
	}
	_, err := dc.ToPayload(nil)
	return err
}

// callConverter is a data converter whose ToPayload runs a function: the
// only way to get the SDK to pause its deadlock detector around it.
type callConverter struct{ f func() error }

func (c callConverter) ToPayload(any) (*commonpb.Payload, error) { return nil, c.f() }
func (callConverter) FromPayload(*commonpb.Payload, any) error   { return errors.ErrUnsupported }
func (callConverter) ToPayloads(...any) (*commonpb.Payloads, error) {
	return nil, errors.ErrUnsupported
}
func (callConverter) FromPayloads(*commonpb.Payloads, ...any) error { return errors.ErrUnsupported }
func (callConverter) ToString(*commonpb.Payload) string             { return "" }
func (callConverter) ToStrings(*commonpb.Payloads) []string         { return nil }

var _ converter.DataConverter = callConverter{}
