package hostworker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/server/common/api"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/snapshot"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/transfer/relay"
	"github.com/berth-dev/berth/workflows"
)

// relayCalls records the workflow service calls a client makes.
type relayCalls struct {
	interceptor.ClientInterceptorBase
	mu    sync.Mutex
	calls map[string]int // by workflow service method
}

func (r *relayCalls) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &relayCallsOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, r: r}
}

func (r *relayCalls) add(method string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[method]++
}

func (r *relayCalls) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = map[string]int{}
	return c
}

type relayCallsOut struct {
	interceptor.ClientOutboundInterceptorBase
	r *relayCalls
}

func (o *relayCallsOut) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	o.r.add("QueryWorkflow")
	return o.Next.QueryWorkflow(ctx, in)
}

func (o *relayCallsOut) UpdateWorkflow(ctx context.Context, in *interceptor.ClientUpdateWorkflowInput) (client.WorkflowUpdateHandle, error) {
	o.r.add("UpdateWorkflowExecution")
	return o.Next.UpdateWorkflow(ctx, in)
}

// historyLength is the number of events in a workflow's history.
func historyLength(t *testing.T, c client.Client, id string) int64 {
	t.Helper()
	d, err := c.DescribeWorkflowExecution(t.Context(), id, "")
	if err != nil {
		t.Fatal(err)
	}
	return d.GetWorkflowExecutionInfo().GetHistoryLength()
}

// storedUnder lists the keys under prefix.
func storedUnder(t *testing.T, bucket *blob.Bucket, prefix string) []string {
	t.Helper()
	var keys []string
	it := bucket.List(&blob.ListOptions{Prefix: prefix})
	for {
		obj, err := it.Next(t.Context())
		if errors.Is(err, io.EOF) {
			return keys
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, obj.Key)
	}
}

// wantType fails unless err is an application error of type typ.
func wantType(t *testing.T, what string, err error, typ string) {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != typ {
		t.Errorf("%s: %v; want a %s error", what, err, typ)
	}
}

// TestRelay: the relay serves a workflow's own blobs and nothing else.
// Another sandbox's output is not read through an unrelated sandbox's
// workflow; the sandbox's outputs are, in all its incarnations. Writes
// and deletes are Updates (writes to Temporal's authorizer), the old
// queries are gone, and the data never enters history. A sandbox's
// uploads are bounded: past the bound, a typed error at once.
func TestRelay(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	bucket := berthtest.Bucket(t)
	const bound = 3 * transfer.MaxChunk
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)},
		Outputs:   bucket, Snapshots: snapshot.New(berthtest.Bucket(t)),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Relay: relay.Limits{UploadBytes: bound},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	for _, id := range []string{"relay-a", "relay-b"} {
		_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
			workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
		if err != nil {
			t.Fatal(err)
		}
		defer c.CancelWorkflow(context.WithoutCancel(ctx), id, "")
	}
	rec := &relayCalls{calls: map[string]int{}}
	rc, err := client.NewClientFromExisting(c, client.Options{Interceptors: []interceptor.ClientInterceptor{rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	cl := berth.New(rc, berth.WithRetryFor(-1))

	// A secret printed in sandbox a, in two incarnations of it.
	var secrets []string
	for i, name := range []string{"first", "after hibernation"} {
		if i > 0 {
			if err := cl.Sandboxes().Handle("relay-a").Hibernate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// Past the inline cap: the output is stored.
		out := execIn(t, c, "relay-a", workflows.ExecRequest{Shell: "printf secret-" + fmt.Sprint(i) + "; head -c 300000 /dev/zero"})
		key := out.Stdout.Blob
		if !strings.HasPrefix(key, transfer.Outputs+out.Sandbox+"/") {
			t.Fatalf("%s: the output is stored at %q, not under its sandbox %s", name, key, out.Sandbox)
		}
		secrets = append(secrets, key)
	}
	if secrets[0][:len("outputs/sb-")+20] != secrets[1][:len("outputs/sb-")+20] || secrets[0] == secrets[1] {
		t.Fatalf("the two outputs %s and %s are not of two incarnations of one sandbox", secrets[0], secrets[1])
	}
	for i, key := range secrets {
		var got bytes.Buffer
		if err := cl.ReadStream(ctx, "relay-a", key, 0, int64(len("secret-0")), &got); err != nil || got.String() != fmt.Sprintf("secret-%d", i) {
			t.Errorf("read %s through its own sandbox: %q, %v", key, got.String(), err)
		}
		var stolen bytes.Buffer
		err := cl.ReadStream(ctx, "relay-b", key, 0, int64(len("secret-0")), &stolen)
		if err == nil || stolen.Len() > 0 || !strings.Contains(err.Error(), "is not workflow relay-b's") {
			t.Errorf("read %s through another sandbox: %q, %v; want it refused", key, stolen.String(), err)
		}
	}

	// The write and delete queries are gone: nothing written, nothing
	// deleted.
	_, err = c.QueryWorkflow(ctx, "relay-b", "", transfer.UpdateWrite, transfer.WriteRequest{Key: "uploads/relay-b/q"}, []byte("x"))
	if err == nil {
		t.Error("a write sent as a query was answered")
	}
	_, err = c.QueryWorkflow(ctx, "relay-b", "", transfer.UpdateDelete, transfer.DeleteRequest{Key: secrets[0]})
	if err == nil {
		t.Error("a delete sent as a query was answered")
	}
	if keys := storedUnder(t, bucket, "uploads/"); len(keys) > 0 {
		t.Errorf("a query wrote %v", keys)
	}

	// An upload: Updates only, none of it in history.
	before := historyLength(t, c, "relay-b")
	rec.take()
	data := bytes.Repeat([]byte("u"), 2*transfer.MaxChunk+10)
	key, parts, err := cl.Upload(ctx, "relay-b", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if parts != 3 || !strings.HasPrefix(key, "uploads/relay-b/") {
		t.Errorf("uploaded to %s in %d parts; want 3 parts under uploads/relay-b/", key, parts)
	}
	if err := cl.DeleteStream(ctx, "relay-b", key); err != nil {
		t.Fatal(err)
	}
	if keys := storedUnder(t, bucket, key); len(keys) > 0 {
		t.Errorf("%v left after the delete", keys)
	}
	// And one more: the client asks once whether the worker signs PUT
	// URLs (a file store does not).
	calls := rec.take()
	if calls["UpdateWorkflowExecution"] != parts+2 || len(calls) != 1 {
		t.Errorf("an upload and a delete called %v; want %d Updates and nothing else", calls, parts+2)
	}
	for method := range calls {
		if m := api.GetMethodMetadata(api.WorkflowServicePrefix + method); m.Access == api.AccessReadOnly {
			t.Errorf("%s is read-only to Temporal's authorizer", method)
		}
	}
	if after := historyLength(t, c, "relay-b"); after != before {
		t.Errorf("the upload and delete made %d history events", after-before)
	}
	it := c.GetWorkflowHistory(ctx, "relay-b", "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if u := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); u != nil && strings.HasPrefix(u.GetAcceptedRequest().GetInput().GetName(), "berth.blob.") {
			t.Errorf("event %d accepted %s", ev.GetEventId(), u.GetAcceptedRequest().GetInput().GetName())
		}
	}

	// Deletes: only a workflow's own exports and uploads.
	export := "exports/" + strings.TrimPrefix(secrets[1], "outputs/")
	if err := bucket.WriteAll(ctx, transfer.PartKey(export, 0), []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	wantType(t, "delete another sandbox's export", cl.DeleteStream(ctx, "relay-b", export), transfer.BadInput)
	wantType(t, "delete an output", cl.DeleteStream(ctx, "relay-a", secrets[0]), transfer.BadInput)
	if keys := storedUnder(t, bucket, export+"/"); len(keys) != 1 {
		t.Errorf("another sandbox deleted %s", export)
	}
	if err := cl.DeleteStream(ctx, "relay-a", export); err != nil {
		t.Errorf("delete an export of its own: %v", err)
	}

	// Uploads: only under a workflow's own prefix, imported only by it.
	wantType(t, "write another sandbox's upload", relayWrite(ctx, rc, "relay-b", "uploads/relay-a/x"), transfer.BadInput)
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	if err := tw.WriteHeader(&tar.Header{Name: "a.txt", Mode: 0o644, Size: 3, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("a's")); err != nil || tw.Close() != nil {
		t.Fatal(err)
	}
	theirs, _, err := cl.Upload(ctx, "relay-a", &tarball)
	if err != nil {
		t.Fatal(err)
	}
	// Sent raw, as a program bypassing the SDK's Import would: the
	// workflow itself refuses the blob.
	h, err := rc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: "relay-b", UpdateName: workflows.UpdateImport,
		Args: []any{workflows.ImportRequest{Blob: theirs, Parts: 1}}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	wantType(t, "import another sandbox's upload", err, string(errdefs.BadInput))
	if err == nil || !strings.Contains(err.Error(), "not an upload of this sandbox's") {
		t.Errorf("import another sandbox's upload: %v", err)
	}

	// Past the bound: refused at once, typed, and nothing left.
	rec.take()
	_, _, err = cl.Upload(ctx, "relay-b", bytes.NewReader(make([]byte, bound+1)))
	wantType(t, "an upload over the bound", err, transfer.BadInput)
	if err == nil || !strings.Contains(err.Error(), "bounded") {
		t.Errorf("an upload over the bound: %v", err)
	}
	if n := rec.take()["UpdateWorkflowExecution"]; n > 4+1 {
		t.Errorf("an upload over the bound sent %d Updates: it was retried", n)
	}
	if keys := storedUnder(t, bucket, "uploads/relay-b/"); len(keys) > 0 {
		t.Errorf("a refused upload left %v", keys)
	}
}

// relayWrite sends one write Update, as a client of the relay would.
func relayWrite(ctx context.Context, c client.Client, id, key string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: transfer.UpdateWrite,
		Args: []any{transfer.WriteRequest{Key: key}, []byte("x")}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}
