package berth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/transfer"
)

// ErrIncomplete means an output could not be had whole: the sandbox did
// not keep all of it, or it was cut at its cap.
var ErrIncomplete = errors.New("output incomplete")

// inFlight is how many relay calls a transfer keeps going at once: a
// call's round trip is mostly waiting, and the worker serves them one
// after another per workflow. The server takes at most 10 Updates in
// flight per workflow (history.maxInFlightUpdates); more wait.
const inFlight = 8

// readChunk reads what is stored of a stream at off, at most max bytes,
// through the relay of workflow workflowID's workers.
func (c *Client) readChunk(ctx context.Context, workflowID, key string, off int64, max int) ([]byte, error) {
	var b []byte
	err := c.retry(ctx, func(ctx context.Context) error {
		v, err := c.temporal.QueryWorkflow(ctx, workflowID, "", transfer.QueryRead,
			transfer.ReadRequest{Key: key, Offset: off, Max: max})
		if err != nil {
			return err
		}
		return v.Get(&b)
	})
	return b, c.unavailable(err, "read "+key, false, "")
}

// directChunk is the most one read of ReadStream asks for on the direct
// path: a stored part (transfer.DefaultPartSize). With inFlight reads
// going, a stream read holds at most inFlight*directChunk bytes.
const directChunk = transfer.DefaultPartSize

// readRelay reads n bytes of a stream at off through the relay, in
// pieces of at most transfer.MaxChunk, and fewer only where the stored
// stream ends.
func (c *Client) readRelay(ctx context.Context, workflowID, key string, off int64, n int) ([]byte, error) {
	out := make([]byte, 0, n)
	for len(out) < n {
		b, err := c.readChunk(ctx, workflowID, key, off+int64(len(out)), min(n-len(out), transfer.MaxChunk))
		if err != nil {
			return out, err
		}
		if len(b) == 0 {
			break
		}
		out = append(out, b...)
	}
	return out, nil
}

// ReadStream writes bytes [from, size) of the stored stream key to w:
// from the blob store with URLs the relay of workflow workflowID's
// workers signs where it can, else through the relay.
func (c *Client) ReadStream(ctx context.Context, workflowID, key string, from, size int64, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		b   []byte
		err error
	}
	var (
		pending []chan result
		off     = from
		direct  = c.newDirectReader(workflowID, key)
	)
	start := func() {
		ch := make(chan result, 1)
		// A chunk is a part read directly (the store's round trip is
		// per request, whatever its size), and MaxChunk through the relay.
		chunk := int64(transfer.MaxChunk)
		if direct.on() {
			chunk = directChunk
		}
		o, n := off, int(min(chunk, size-off))
		off += int64(n)
		pending = append(pending, ch)
		go func() {
			b, ok := direct.read(ctx, o, n)
			var err error
			if !ok {
				b, err = c.readRelay(ctx, workflowID, key, o, n)
			}
			if err == nil && len(b) != n {
				err = fmt.Errorf("%s: %d bytes at offset %d, want %d: the stored stream is short", key, len(b), o, n)
			}
			ch <- result{b, err}
		}()
	}
	for len(pending) < inFlight && off < size {
		start()
	}
	for len(pending) > 0 {
		r := <-pending[0]
		pending = pending[1:]
		if r.err != nil {
			return r.err
		}
		if _, err := w.Write(r.b); err != nil {
			return err
		}
		if off < size {
			start()
		}
	}
	return nil
}

// WriteOutput writes an output from offset from on to w: from what the
// result carries when it is whole there, else from the blob store through
// the relay of workflow workflowID's workers. An output that cannot be had
// whole is written as far as it can be and fails with ErrIncomplete.
func (c *Client) WriteOutput(ctx context.Context, workflowID string, o transfer.Output, from int64, w io.Writer) error {
	switch {
	case !o.Truncated:
		if from < int64(len(o.Inline)) {
			if _, err := w.Write(o.Inline[from:]); err != nil {
				return err
			}
		}
	case o.Blob != "":
		// What is stored: the stream less what was dropped from its middle.
		if err := c.ReadStream(ctx, workflowID, o.Blob, from, o.Size-o.Dropped, w); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%w: %d of %d bytes are not stored anywhere", ErrIncomplete, o.Size-int64(len(o.Inline)), o.Size)
	}
	if o.Dropped > 0 {
		return fmt.Errorf("%w: %d of its %d bytes were not kept (past the output cap, or while no worker was attached); only its start and end were printed", ErrIncomplete, o.Dropped, o.Size)
	}
	if o.Incomplete {
		return fmt.Errorf("%w: part of it was not kept while no worker was attached", ErrIncomplete)
	}
	return nil
}

// Upload stores what r reads as an upload for sandbox sandboxID (a tar
// stream to import), and says where: the key and the number of parts.
// The parts go to the blob store with PUT URLs the relay of its workflow
// signs where it can, else through the relay. A sandbox's uploads are
// bounded (relay.DefaultUploadBytes, package transfer/relay): past the bound, Upload fails at
// once with a BadInput error.
func (c *Client) Upload(ctx context.Context, sandboxID string, r io.Reader) (key string, parts int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prefix, err := transfer.UploadPrefix(sandboxID)
	if err != nil {
		return "", 0, err
	}
	key = prefix + NewID("")
	errs := make(chan error, inFlight)
	running := 0
	wait := func() error {
		running--
		return <-errs
	}
	var (
		first  error
		direct atomic.Bool
	)
	direct.Store(!c.notSignable.has(sandboxID, http.MethodPut))
	for eof := false; first == nil && !eof; {
		// A batch of parts, read, signed for at once, and sent.
		var batch [][]byte
		for len(batch) < inFlight && !eof {
			buf := make([]byte, transfer.MaxChunk)
			n, rerr := io.ReadFull(r, buf)
			if n > 0 || (parts == 0 && len(batch) == 0) {
				batch = append(batch, buf[:n])
			}
			eof = rerr == io.EOF || rerr == io.ErrUnexpectedEOF
			if rerr != nil && !eof {
				first = rerr
				break
			}
		}
		if first != nil || len(batch) == 0 {
			break
		}
		urls := make([]string, len(batch))
		if direct.Load() && len(batch[len(batch)-1]) > 0 {
			sizes := make([]int64, len(batch))
			for i, b := range batch {
				sizes[i] = int64(len(b))
			}
			signed, err := c.signPut(ctx, sandboxID, key, parts, sizes)
			switch {
			case err == nil:
				urls = signed
			case isType(err, transfer.BadInput):
				first = err // past the bound, or not its own: the relay would say so too
			default:
				direct.Store(false)
			}
		}
		for i, data := range batch {
			if first != nil {
				break
			}
			if running == inFlight {
				if err := wait(); err != nil {
					first = err
					break
				}
			}
			part, url := parts, urls[i]
			parts++
			running++
			go func() {
				if url != "" && direct.Load() {
					if c.put(ctx, url, data) == nil {
						errs <- nil
						return
					}
					direct.Store(false) // the store is out of reach, or the URL no good
				}
				errs <- c.writeChunk(ctx, sandboxID, key, part, data)
			}()
		}
	}
	// Parts sent are waited for, not cancelled: a part sent could be
	// stored after the delete below.
	for running > 0 {
		if err := wait(); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		c.DeleteStream(context.WithoutCancel(ctx), sandboxID, key)
		return "", 0, first
	}
	return key, parts, nil
}

func (c *Client) writeChunk(ctx context.Context, workflowID, key string, part int, data []byte) error {
	return c.relayUpdate(ctx, workflowID, transfer.UpdateWrite, "upload to "+workflowID,
		transfer.WriteRequest{Key: key, Part: part}, data)
}

// DeleteStream removes an export or an upload of workflow workflowID's
// once it is no longer needed (what is left behind, the reaper removes
// after an hour).
func (c *Client) DeleteStream(ctx context.Context, workflowID, key string) error {
	return c.relayUpdate(ctx, workflowID, transfer.UpdateDelete, "delete "+key, transfer.DeleteRequest{Key: key})
}

// relayUpdate sends one of the relay's Updates, whose validator does
// the work and answers with the rejection transfer.Stored when it is
// done: a rejected Update leaves nothing in history, not even its
// arguments.
func (c *Client) relayUpdate(ctx context.Context, workflowID, name, op string, args ...any) error {
	err := c.retry(ctx, func(ctx context.Context) error {
		h, err := c.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			WorkflowID: workflowID, UpdateName: name, Args: args,
			WaitForStage: client.WorkflowUpdateStageAccepted,
		})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		var app *temporal.ApplicationError
		switch {
		case err == nil:
			return fmt.Errorf("%s: the worker accepted %s, which no berth relay does", op, name)
		case errors.As(err, &app) && app.Type() == transfer.Stored:
			return nil
		case errors.As(err, &app) && app.Type() == transfer.StoreFailed:
			return serviceerror.NewUnavailable(app.Error()) // the store, for now: again
		}
		return err
	})
	return c.unavailable(err, op, false, "")
}
