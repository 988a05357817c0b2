package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"gocloud.dev/blob"

	"github.com/berth-dev/berth/activities"
	"github.com/berth-dev/berth/workflows"
)

// followOutput prints a command's output live as the blob store receives
// it, once keys can say where it goes, then the rest from its result
// when result returns. Without the blob store (a worker elsewhere), the
// output comes at the end.
func followOutput(ctx context.Context, dataDir string, keys func(context.Context) (string, string, bool),
	result func(context.Context) (workflows.RunOutput, error)) (workflows.RunOutput, error) {
	type res struct {
		out workflows.RunOutput
		err error
	}
	done := make(chan res, 1)
	go func() {
		out, err := result(ctx)
		done <- res{out, err}
	}()
	bucket, err := openBucket(ctx, blobURL(dataDir))
	if err != nil {
		bucket = nil
	} else {
		defer bucket.Close()
	}
	var streams [2]*activities.Follower
	writers := [2]io.Writer{os.Stdout, os.Stderr}
	tick := time.NewTicker(activities.LiveEvery)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return r.out, r.err
			}
			for i, o := range []activities.Output{r.out.Stdout, r.out.Stderr} {
				var off int64
				if streams[i] != nil {
					off = streams[i].Offset()
				}
				printFrom(ctx, writers[i], o, off, bucket)
			}
			return r.out, nil
		case <-tick.C:
		}
		if bucket == nil {
			continue
		}
		if streams[0] == nil {
			stdout, stderr, ok := keys(ctx)
			if !ok {
				continue // not started yet
			}
			streams[0] = &activities.Follower{Bucket: bucket, Key: stdout}
			streams[1] = &activities.Follower{Bucket: bucket, Key: stderr}
		}
		for i, f := range streams {
			// Bytes come with an error too; the error means only that
			// the rest comes later.
			b, _ := f.Next(ctx)
			writers[i].Write(b)
		}
	}
}

// printFrom writes a stream from offset off: whole from the blob store
// when it did not fit inline and the store is there, else what the
// result carries.
func printFrom(ctx context.Context, w io.Writer, o activities.Output, off int64, bucket *blob.Bucket) {
	if !o.Truncated {
		if off < int64(len(o.Inline)) {
			w.Write(o.Inline[off:])
		}
		return
	}
	if bucket != nil {
		if r, err := activities.Open(ctx, bucket, o); err == nil {
			defer r.Close()
			if _, err := io.CopyN(io.Discard, r, off); err == nil {
				if _, err := io.Copy(w, r); err == nil {
					return
				}
			}
		}
	}
	if off == 0 {
		w.Write(o.Head())
		fmt.Fprintf(w, "\n[berth: %d bytes not shown]\n", o.Size-int64(len(o.Inline)))
		w.Write(o.Tail())
	}
}
