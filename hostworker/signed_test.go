package hostworker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

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

// s3Store starts versitygw, an S3 server, on loopback, over a temporary
// directory, and opens a bucket of it as a berth host does (s3blob).
// versitygw is installed by .ci/run: a machine without it fails the test.
func s3Store(t testing.TB) *blob.Bucket {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		t.Fatalf("versitygw, the S3 server the direct path is tested against, is not on PATH (.ci/run installs it): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const access, secret = "berthtest", "berthtestsecret"
	cmd := exec.Command(bin, "--access", access, "--secret", secret, "--port", addr, "posix", t.TempDir())
	var logs bytes.Buffer // its log of every request: shown when the test fails
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("versitygw:\n%s", logs.Bytes()[max(0, logs.Len()-8<<10):])
		}
	})
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	endpoint := "http://" + addr
	s3c := s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint), UsePathStyle: true, Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider(access, secret, ""),
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := s3c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String("berth")})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create a bucket in versitygw: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, err := hostworker.OpenBucket(t.Context(), "s3://berth?endpoint="+endpoint+"&use_path_style=true&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// namedCalls counts the relay's operations a client sends, by name.
type namedCalls struct {
	interceptor.ClientInterceptorBase
	calls *relayCalls
}

func (n *namedCalls) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &namedCallsOut{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, r: n.calls}
}

type namedCallsOut struct {
	interceptor.ClientOutboundInterceptorBase
	r *relayCalls
}

func (o *namedCallsOut) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	o.r.add(in.QueryType)
	return o.Next.QueryWorkflow(ctx, in)
}

func (o *namedCallsOut) UpdateWorkflow(ctx context.Context, in *interceptor.ClientUpdateWorkflowInput) (client.WorkflowUpdateHandle, error) {
	o.r.add(in.UpdateName)
	return o.Next.UpdateWorkflow(ctx, in)
}

// tarOf is a tar stream of one file.
func tarOf(t testing.TB, name string, data []byte) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil || tw.Close() != nil {
		t.Fatal(err)
	}
	return &b
}

// signedHost starts a host worker over bucket, with signing on, and a
// sandbox workflow for each id.
func signedHost(t *testing.T, c client.Client, bucket *blob.Bucket, limits relay.Limits, ids ...string) {
	t.Helper()
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(t)},
		Outputs:   bucket, Snapshots: snapshot.New(berthtest.Bucket(t)),
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Relay: limits,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	for _, id := range ids {
		_, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: sandbox.DefaultQueue}, workflows.Sandbox,
			workflows.SandboxInput{Provider: "linux", IdleTimeout: sandbox.NoIdleTimeout, HibernateAfter: sandbox.NoIdleTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CancelWorkflow(context.WithoutCancel(t.Context()), id, "") })
		sandboxStatus(t, c, id)
	}
}

// recordingClient is a berth client whose relay operations rec counts.
func recordingClient(t *testing.T, c client.Client, opts ...berth.Option) (*berth.Client, *relayCalls, client.Client) {
	t.Helper()
	rec := &relayCalls{calls: map[string]int{}}
	rc, err := client.NewClientFromExisting(c, client.Options{Interceptors: []interceptor.ClientInterceptor{&namedCalls{calls: rec}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	return berth.New(rc, append([]berth.Option{berth.WithRetryFor(-1)}, opts...)...), rec, rc
}

// copyInOut copies data into sandbox id as a file and reads it back,
// byte for byte.
func copyInOut(t *testing.T, cl *berth.Client, id, name string, data []byte) {
	t.Helper()
	if err := cl.Sandboxes().Handle(id).Import(t.Context(), tarOf(t, name, data)); err != nil {
		t.Fatalf("copy %s in: %v", name, err)
	}
	var got bytes.Buffer
	if err := cl.Sandboxes().Handle(id).CopyFile(t.Context(), name, &got); err != nil {
		t.Fatalf("copy %s out: %v", name, err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("copied %s out: %d bytes, not the %d copied in", name, got.Len(), len(data))
	}
}

// TestRelaySigned: on a shared store (S3), cp in and out go to the store
// itself with URLs the relay signs, not through the relay, byte for
// byte; the relay signs only for what the workflow owns and within its
// upload bounds, which the store holds a PUT to; a client that cannot
// reach the store uses the relay and succeeds all the same.
func TestRelaySigned(t *testing.T) {
	ctx := t.Context()
	c := server(t)
	bucket := s3Store(t)
	const bound = 16 * transfer.MaxChunk
	signedHost(t, c, bucket, relay.Limits{UploadBytes: bound, Sign: true}, "signed-a", "signed-b")
	cl, rec, rc := recordingClient(t, c)

	// Direct: the parts go to the store, the relay only signs.
	data := make([]byte, 5*transfer.MaxChunk+12345)
	rand.Read(data)
	rec.take()
	copyInOut(t, cl, "signed-a", "big.bin", data)
	calls := rec.take()
	if calls[transfer.UpdateWrite] > 0 || calls[transfer.QueryRead] > 0 {
		t.Errorf("a cp on a shared store went through the relay: %v", calls)
	}
	if calls[transfer.UpdateSign] == 0 || calls[transfer.QuerySign] == 0 {
		t.Errorf("a cp on a shared store signed nothing: %v", calls)
	}

	// Signing for what the workflow does not own: refused.
	out := execIn(t, c, "signed-a", workflows.ExecRequest{Shell: "printf secret; head -c 300000 /dev/zero"})
	_, err := rc.QueryWorkflow(ctx, "signed-b", "", transfer.QuerySign, transfer.SignRequest{Key: out.Stdout.Blob, Count: 1})
	wantQueryType(t, "sign a GET of another sandbox's output", err, transfer.BadInput)
	err = signPut(ctx, rc, "signed-b", transfer.SignRequest{Key: "uploads/signed-a/x", Sizes: []int64{1}})
	wantType(t, "sign a PUT of another sandbox's upload", err, transfer.BadInput)
	_, err = rc.QueryWorkflow(ctx, "signed-a", "", transfer.QuerySign, transfer.SignRequest{Key: "uploads/signed-a/x", Count: 1})
	wantQueryType(t, "sign a GET of an upload", err, transfer.BadInput)
	if _, err := rc.QueryWorkflow(ctx, "signed-a", "", transfer.QuerySign, transfer.SignRequest{Key: out.Stdout.Blob, Count: 1}); err != nil {
		t.Errorf("sign a GET of its own output: %v", err)
	}

	// Past the upload bounds: refused, by the relay (bytes, part
	// numbers) and by the store (a PUT longer than signed).
	err = signPut(ctx, rc, "signed-b", transfer.SignRequest{Key: "uploads/signed-b/x", First: relay.DefaultUploadParts, Sizes: []int64{1}})
	wantType(t, "sign a PUT past the last part", err, transfer.BadInput)
	err = signPut(ctx, rc, "signed-b", transfer.SignRequest{Key: "uploads/signed-b/x", Sizes: []int64{transfer.MaxChunk + 1}})
	wantType(t, "sign a PUT of a part too large", err, transfer.BadInput)
	urls, err := signedURLs(ctx, rc, "signed-b", transfer.SignRequest{Key: "uploads/signed-b/y", Sizes: []int64{10}})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{11, 9} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, urls.URLs[0], bytes.NewReader(make([]byte, n)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("a PUT of %d bytes with a URL signed for 10 was stored", n)
		}
	}
	_, _, err = cl.Upload(ctx, "signed-b", bytes.NewReader(make([]byte, bound+1)))
	wantType(t, "an upload over the bound", err, transfer.BadInput)
	if keys := storedUnder(t, bucket, "uploads/signed-b/"); len(keys) > 0 {
		t.Errorf("refused signings and PUTs left %v", keys)
	}

	// The store out of the client's reach: the relay, and success.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := closed.Addr().String()
	closed.Close()
	away := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, unreachable)
	}}}
	cl2, rec2, _ := recordingClient(t, c, berth.WithHTTPClient(away))
	copyInOut(t, cl2, "signed-a", "again.bin", data)
	if calls := rec2.take(); calls[transfer.UpdateWrite] == 0 || calls[transfer.QueryRead] == 0 {
		t.Errorf("a cp with the store out of reach did not use the relay: %v", calls)
	}
}

// TestRelayNotSignable: a file store (berth dev) signs nothing, even
// asked to: the relay answers NotSignable, once, and carries the cp.
func TestRelayNotSignable(t *testing.T) {
	c := server(t)
	signedHost(t, c, berthtest.Bucket(t), relay.Limits{Sign: true}, "unsigned")
	cl, rec, rc := recordingClient(t, c)
	data := make([]byte, 3*transfer.MaxChunk)
	rand.Read(data)
	rec.take()
	for i := range 2 {
		copyInOut(t, cl, "unsigned", fmt.Sprint("f", i), data)
	}
	calls := rec.take()
	if calls[transfer.UpdateWrite] == 0 || calls[transfer.QueryRead] == 0 {
		t.Errorf("a cp on a file store did not use the relay: %v", calls)
	}
	if calls[transfer.UpdateSign] != 1 || calls[transfer.QuerySign] != 1 {
		t.Errorf("two cps on a file store asked to sign %v; want once each way", calls)
	}
	err := signPut(t.Context(), rc, "unsigned", transfer.SignRequest{Key: "uploads/unsigned/x", Sizes: []int64{1}})
	wantType(t, "sign a PUT on a file store", err, transfer.NotSignable)
}

// signPut sends one UpdateSign.
func signPut(ctx context.Context, c client.Client, id string, req transfer.SignRequest) error {
	_, err := signedURLs(ctx, c, id, req)
	return err
}

// signedURLs sends one UpdateSign and returns what it signed.
func signedURLs(ctx context.Context, c client.Client, id string, req transfer.SignRequest) (transfer.SignedURLs, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: transfer.UpdateSign,
		Args: []any{req}, WaitForStage: client.WorkflowUpdateStageAccepted})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var app *temporal.ApplicationError
	var s transfer.SignedURLs
	if errors.As(err, &app) && app.Type() == transfer.Signed {
		return s, app.Details(&s)
	}
	if err == nil {
		err = fmt.Errorf("%s accepted", transfer.UpdateSign)
	}
	return s, err
}

// wantQueryType fails unless err is a Query's failure of type typ.
func wantQueryType(t *testing.T, what string, err error, typ string) {
	t.Helper()
	var q *serviceerror.QueryFailed
	if !errors.As(err, &q) || q.Failure.GetApplicationFailureInfo().GetType() != typ {
		t.Errorf("%s: %v; want a %s failure", what, err, typ)
	}
}
