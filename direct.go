package berth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/transfer"
)

// The direct path: where the worker's blob store is one the client may
// reach (s3, gs, azblob), parts are read and written in it with URLs the
// workflow's relay signs, and only those URLs go through the server.
// Anything that fails on the way (the store out of reach, a URL
// expired, a part not there yet) is done through the relay instead: the
// direct path only ever makes a transfer faster.

// WithHTTPClient sets the HTTP client the direct path uses to reach the
// blob store (by default one whose requests time out after
// directTimeout).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// directTimeout bounds one request to the store: a part is at most a
// MiB, and a store that takes longer is better left to the relay.
const directTimeout = 30 * time.Second

// notSignable remembers the workflows whose worker answered NotSignable:
// they are asked once. It is bounded; forgotten, a workflow is asked again.
type notSignable struct {
	mu  sync.Mutex
	ids map[string]bool
}

const maxNotSignable = 4096

// has says whether workflow id's worker signs no URLs for method (a
// store may sign reads and not writes).
func (n *notSignable) has(id, method string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ids[method+" "+id]
}

func (n *notSignable) add(id, method string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ids == nil || len(n.ids) >= maxNotSignable {
		n.ids = map[string]bool{}
	}
	n.ids[method+" "+id] = true
}

// isType says whether err is an application error of type typ, as an
// Update or a Query (whose failure comes as a QueryFailed) answers it.
func isType(err error, typ string) bool {
	var app *temporal.ApplicationError
	var q *serviceerror.QueryFailed
	switch {
	case errors.As(err, &app):
		return app.Type() == typ
	case errors.As(err, &q):
		return q.Failure.GetApplicationFailureInfo().GetType() == typ
	}
	return false
}

// directReader reads one stream's parts with signed URLs.
type directReader struct {
	c               *Client
	workflowID, key string
	mu              sync.Mutex
	off             bool // the direct path failed: the relay only
	partSize        int
	urls            map[int]string
	expires         time.Time
}

func (c *Client) newDirectReader(workflowID, key string) *directReader {
	return &directReader{c: c, workflowID: workflowID, key: key, off: c.notSignable.has(workflowID, http.MethodGet)}
}

// urlMargin is how long before its expiry a URL is signed again.
const urlMargin = 30 * time.Second

// url is the signed URL of part i, and the part size; ok false means
// the relay.
func (d *directReader) url(ctx context.Context, i int) (url string, partSize int, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return "", 0, false
	}
	if u, ok := d.urls[i]; ok && time.Until(d.expires) > urlMargin {
		return u, d.partSize, true
	}
	v, err := d.c.temporal.QueryWorkflow(ctx, d.workflowID, "", transfer.QuerySign,
		transfer.SignRequest{Key: d.key, First: i, Count: transfer.MaxSignParts})
	var s transfer.SignedURLs
	if err == nil {
		err = v.Get(&s)
	}
	if err != nil || s.PartSize <= 0 || len(s.URLs) == 0 {
		if isType(err, transfer.NotSignable) {
			d.c.notSignable.add(d.workflowID, http.MethodGet)
		}
		d.off = true
		return "", 0, false
	}
	d.partSize, d.expires, d.urls = s.PartSize, s.Expires, map[int]string{}
	for j, u := range s.URLs {
		d.urls[i+j] = u
	}
	return d.urls[i], d.partSize, true
}

// on says whether the direct path is still tried.
func (d *directReader) on() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.off
}

func (d *directReader) fail() {
	d.mu.Lock()
	d.off = true
	d.mu.Unlock()
}

// read reads n bytes of the stream at off from the store; ok false means
// they are to be read through the relay.
func (d *directReader) read(ctx context.Context, off int64, n int) (b []byte, ok bool) {
	out := make([]byte, 0, n)
	for len(out) < n {
		i := 0
		d.mu.Lock()
		size := d.partSize
		d.mu.Unlock()
		if size > 0 {
			i = int(off / int64(size))
		}
		url, size, ok := d.url(ctx, i)
		if !ok {
			return nil, false
		}
		if int(off/int64(size)) != i { // the first signing told the part size
			continue
		}
		within := off % int64(size)
		k := min(n-len(out), size-int(within))
		got, found, err := d.c.get(ctx, url, within, k)
		if err != nil {
			d.fail()
			return nil, false
		}
		if !found || len(got) != k {
			return nil, false // not stored whole yet: the relay reads partial parts
		}
		out = append(out, got...)
		off += int64(k)
	}
	return out, true
}

// get reads k bytes of an object from within; found false when it is
// not there.
func (c *Client) get(ctx context.Context, url string, within int64, k int) (b []byte, found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", within, within+int64(k)-1))
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusRequestedRangeNotSatisfiable:
		return nil, false, nil
	case http.StatusPartialContent:
	default:
		return nil, false, fmt.Errorf("GET of a part: %s", resp.Status)
	}
	b, err = io.ReadAll(io.LimitReader(resp.Body, int64(k)+1))
	return b, true, err
}

// put stores data with a signed PUT URL.
func (c *Client) put(ctx context.Context, url string, data []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.ContentLength = int64(len(data))
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT of a part: %s", resp.Status)
	}
	return nil
}

// signPut asks workflow workflowID's relay for PUT URLs of parts first...
// of upload key, of the sizes given. An error of type BadInput is the
// upload's bound; any other means the relay.
func (c *Client) signPut(ctx context.Context, workflowID, key string, first int, sizes []int64) ([]string, error) {
	h, err := c.temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: transfer.UpdateSign,
		Args:         []any{transfer.SignRequest{Key: key, First: first, Sizes: sizes}},
		WaitForStage: client.WorkflowUpdateStageAccepted,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	var app *temporal.ApplicationError
	switch {
	case err == nil:
		return nil, fmt.Errorf("the worker accepted %s, which no berth relay does", transfer.UpdateSign)
	case errors.As(err, &app) && app.Type() == transfer.Signed:
		var s transfer.SignedURLs
		if err := app.Details(&s); err != nil {
			return nil, err
		}
		if len(s.URLs) != len(sizes) {
			return nil, fmt.Errorf("%d URLs signed for %d parts", len(s.URLs), len(sizes))
		}
		return s.URLs, nil
	case isType(err, transfer.NotSignable):
		c.notSignable.add(workflowID, http.MethodPut)
	}
	return nil, err
}
