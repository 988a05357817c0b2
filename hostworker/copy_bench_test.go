package hostworker_test

import (
	"archive/tar"
	"bytes"
	"io"
	"math/rand/v2"
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

// copySize is the file BenchmarkCopy moves each way: the figure of the
// issue's "cp of 200 MiB through the server".
const copySize = 200 << 20

// BenchmarkCopy is berth sandbox cp of one 200 MiB file of random bytes
// (nothing to compress), client to a linux sandbox's workspace ("in":
// Sandbox.Import of its tar stream) and back ("out": Sandbox.Export), on
// the embedded server: on a file store, through the relay ("file"), and
// on an S3 store (versitygw on loopback) with signed URLs ("s3"). Beside
// each, in the same run, the baseline: the same tar stream's bytes
// written to that store directly as the worker stores a stream
// ("store-write", transfer.PartWriter) and read back ("store-read",
// transfer.Open). MB/s is the file's bytes over the whole copy.
func BenchmarkCopy(b *testing.B) {
	ctx := b.Context()
	archive := copyArchive(b)
	c := server(b)
	stores := []struct {
		name   string
		bucket func(testing.TB) *blob.Bucket
		limits relay.Limits
	}{
		{"file", berthtest.Bucket, relay.Limits{}},
		{"s3", s3Store, relay.Limits{Sign: true}},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			bucket := st.bucket(b)
			b.Run("store-write", func(b *testing.B) {
				b.SetBytes(copySize)
				for b.Loop() {
					w := transfer.NewPartWriter(ctx, bucket, "exports/bench/store", transfer.DefaultPartSize, 0)
					if _, err := w.Write(archive); err != nil {
						b.Fatal(err)
					}
					if err := w.Close(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("store-read", func(b *testing.B) {
				b.SetBytes(copySize)
				parts := (len(archive) + transfer.DefaultPartSize - 1) / transfer.DefaultPartSize
				for b.Loop() {
					r, err := transfer.Open(ctx, bucket, transfer.Output{Blob: "exports/bench/store", Parts: parts, Size: int64(len(archive)), Truncated: true})
					if err != nil {
						b.Fatal(err)
					}
					n, err := io.Copy(io.Discard, r)
					r.Close()
					if err != nil || n != int64(len(archive)) {
						b.Fatalf("read %d bytes (%v), want %d", n, err, len(archive))
					}
				}
			})
			// One worker at a time on the default queue: it is stopped
			// before the next store's starts.
			queue := sandbox.DefaultQueue
			w, err := hostworker.StartWorker(c, hostworker.Options{
				Providers: map[string]provider.Provider{"linux": berthtest.Provider(b)}, Outputs: bucket,
				Queue: queue, HostQueue: queue, Relay: st.limits,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "copy-bench-" + st.name, TaskQueue: queue},
				workflows.Sandbox, workflows.SandboxInput{Provider: "linux"})
			if err != nil {
				b.Fatal(err)
			}
			defer c.TerminateWorkflow(ctx, run.GetID(), "", "benchmark over")
			sandboxStatus(b, c, run.GetID())
			cl := berth.New(c)
			b.Run("in", func(b *testing.B) {
				b.SetBytes(copySize)
				for b.Loop() {
					if err := cl.Sandboxes().Handle(run.GetID()).Import(ctx, bytes.NewReader(archive)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("out", func(b *testing.B) {
				b.SetBytes(copySize)
				for b.Loop() {
					var got countingWriter
					if err := cl.Sandboxes().Handle(run.GetID()).Export(ctx, "big", &got); err != nil {
						b.Fatal(err)
					}
					if got < copySize {
						b.Fatalf("exported %d bytes, want over %d", got, copySize)
					}
				}
			})
		})
	}
}

// copyArchive is a tar stream of one file, big, of copySize random bytes.
func copyArchive(b testing.TB) []byte {
	data := make([]byte, copySize)
	rng := rand.NewChaCha8([32]byte{'b', 'e', 'r', 't', 'h'})
	_, _ = rng.Read(data)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Mode: 0o644, Size: copySize, Typeflag: tar.TypeReg}); err != nil {
		b.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}
