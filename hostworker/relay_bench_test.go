package hostworker_test

import (
	"bytes"
	"io"
	"testing"

	"go.temporal.io/sdk/client"
	"gocloud.dev/blob"

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/internal/berthtest"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/transfer"
	"github.com/berth-dev/berth/transfer/relay"
	"github.com/berth-dev/berth/workflows"
)

// BenchmarkRelay moves 64 MiB through the relay, client to worker's blob
// store ("write") and back ("read"), on the embedded server: the path of
// berth sandbox cp and of outputs too large to travel inline.
func BenchmarkRelay(b *testing.B) { benchTransfer(b, berthtest.Bucket(b), relay.Limits{}) }

// BenchmarkRelayS3 moves the same on an S3 store (versitygw, on
// loopback): through the relay ("relay"), and with signed URLs, the
// client to the store itself ("direct").
func BenchmarkRelayS3(b *testing.B) {
	for _, sign := range []bool{false, true} {
		name := map[bool]string{false: "relay", true: "direct"}[sign]
		b.Run(name, func(b *testing.B) { benchTransfer(b, s3Store(b), relay.Limits{Sign: sign}) })
	}
}

func benchTransfer(b *testing.B, bucket *blob.Bucket, limits relay.Limits) {
	ctx := b.Context()
	c := server(b)
	w, err := hostworker.StartWorker(c, hostworker.Options{
		Providers: map[string]provider.Provider{"linux": berthtest.Provider(b)}, Outputs: bucket,
		Queue: sandbox.DefaultQueue, HostQueue: sandbox.DefaultQueue,
		Relay: limits,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "relay-bench", TaskQueue: sandbox.DefaultQueue},
		workflows.Sandbox, workflows.SandboxInput{Provider: "linux"})
	if err != nil {
		b.Fatal(err)
	}
	defer c.TerminateWorkflow(ctx, run.GetID(), "", "benchmark over")
	cl := berth.New(c)
	const size = 64 << 20
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	var key string
	var parts int
	b.Run("write", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			if key, parts, err = cl.Upload(ctx, run.GetID(), bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
		}
	})
	_ = key
	// An export of the sandbox's, as the worker stores one, read back.
	export := transfer.Exports + sandboxStatus(b, c, run.GetID()).ID + "/x"
	pw := transfer.NewPartWriter(ctx, bucket, export, transfer.DefaultPartSize, 0)
	if _, err := pw.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		b.Fatal(err)
	}
	parts = pw.Parts()
	b.Run("read", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			var got countingWriter
			if err := cl.WriteOutput(ctx, run.GetID(), transfer.Output{Truncated: true, Blob: export, Parts: parts, Size: size}, 0, &got); err != nil {
				b.Fatal(err)
			}
			if got != size {
				b.Fatalf("read %d bytes, want %d", got, size)
			}
		}
	})
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

var _ io.Writer = (*countingWriter)(nil)
