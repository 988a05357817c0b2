package agentcore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockagentcore/types"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/agentcore/agentcoreinit"
	"github.com/berth-dev/berth/provider/remote"
)

// MaxRelayReply bounds what the API reads of one relayed call's output:
// a Reply of agentcoreinit.MaxReply bytes, in JSON's base64.
const MaxRelayReply = agentcoreinit.MaxReply*4/3 + 64<<10

// Waits of the relay's long polls: the first call of a request waits
// little for the answer to begin, the reads of a stream that goes on
// wait long, each bounded well within a call's time.
const (
	openWait = 10 * time.Second
	readWait = 10 * time.Second
)

// callTries bounds how often one relayed call is sent again after the
// service failed to answer it: every call is idempotent.
const callTries = 3

// bodyGather is how long a request's body is gathered once some of it
// has come, so that a short body goes in one call with its start.
const bodyGather = 5 * time.Millisecond

// maxBodyPiece bounds the body one call carries, so that a large body
// streams through in bounded memory; a piece larger than
// agentcoreinit.MaxInline goes to the session in a file first.
const maxBodyPiece = 1 << 20

// Endpoint implements remote.API: the session has no port to reach,
// so every request to the daemon is carried by the relay (package
// agentcoreinit), one executeCommand per piece of it.
func (a *API) Endpoint(ctx context.Context, m remote.Machine, port int) (remote.Endpoint, error) {
	if port <= 0 || port > 65535 {
		return remote.Endpoint{}, fmt.Errorf("%w: %s: port %d", errdefs.ErrBadInput, Name, port)
	}
	return remote.Endpoint{URL: "http://berth-sandboxd", Transport: &relayTransport{a: a, session: m.ID}}, nil
}

// relayTransport is an http.RoundTripper over the relay in one session.
type relayTransport struct {
	a       *API
	session string
}

// call sends one Call through the relay and returns its Reply.
func (t *relayTransport) call(ctx context.Context, c agentcoreinit.Call) (agentcoreinit.Reply, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return agentcoreinit.Reply{}, err
	}
	cmd := shellQuote(t.a.cfg.DaemonPath) + " " + agentcoreinit.Arg + " call --socket " + socket +
		" <<'BERTH_RELAY'\n" + base64.StdEncoding.EncodeToString(b) + "\nBERTH_RELAY\n"
	var last error
	for try := range callTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return agentcoreinit.Reply{}, ctx.Err()
			case <-time.After(time.Duration(try) * 200 * time.Millisecond):
			}
		}
		cctx, cancel := context.WithTimeout(ctx, c.Wait+callTimeout)
		res, err := t.a.command(cctx, "relay "+c.Op, t.session, cmd)
		cancel()
		switch {
		case err == nil && res.code == 0:
			if len(res.stdout) > MaxRelayReply {
				return agentcoreinit.Reply{}, fmt.Errorf("%s: relay: a reply of %d bytes", Name, len(res.stdout))
			}
			var r agentcoreinit.Reply
			if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
				return agentcoreinit.Reply{}, fmt.Errorf("%s: relay: the reply is not JSON", Name)
			}
			if r.Error != "" {
				return r, errors.New(Name + ": " + firstLine(r.Error))
			}
			return r, nil
		case err == nil:
			// The relay's own failure (its server gone): no retry helps.
			return agentcoreinit.Reply{}, fmt.Errorf("%s: relay: exit %d: %s", Name, res.code, firstLine(res.stderr))
		case ctx.Err() != nil:
			return agentcoreinit.Reply{}, ctx.Err()
		case !errors.Is(err, errdefs.ErrProviderUnavailable):
			return agentcoreinit.Reply{}, err
		}
		last = err
	}
	return agentcoreinit.Reply{}, last
}

func newStreamID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RoundTrip implements http.RoundTripper: the request is opened in the
// relay with as much of its body as is at hand, the rest of the body
// follows in write calls, and the answer's body is read in read calls
// as the client reads it. The daemon's bearer token is the relay's: the
// request's Authorization never leaves this process.
func (t *relayTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	h := req.Header.Clone()
	h.Del("Authorization")
	open := agentcoreinit.Call{Op: agentcoreinit.OpOpen, ID: newStreamID(), Method: req.Method,
		Target: req.URL.RequestURI(), Header: h, Wait: openWait}
	var body *bodySender
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		open.EOF = true
	default:
		body = newBodySender(t, open.ID, req.Body)
		first, eof, err := body.gather(ctx)
		if err != nil {
			body.stop()
			return nil, err
		}
		if len(first) > agentcoreinit.MaxInline {
			if err := body.spool(ctx, &open, first); err != nil {
				body.stop()
				return nil, err
			}
		} else {
			open.Body = first
		}
		open.EOF = eof
		body.sent = int64(len(first))
		if !eof {
			// The rest of the body goes in writes, which need the
			// request open: the open waits for no answer, which may
			// need the rest.
			open.Wait = 0
		}
	}
	r, err := t.call(ctx, open)
	if err != nil {
		if body != nil {
			body.stop()
		}
		return nil, err
	}
	if body != nil && !open.EOF {
		go body.run(ctx)
	}
	ans := &answer{t: t, id: open.ID, ctx: ctx, body: body}
	for r.Status == 0 {
		if r.Done {
			ans.close()
			return nil, fmt.Errorf("%s: relay: the daemon answered nothing", Name)
		}
		if r, err = t.call(ctx, agentcoreinit.Call{Op: agentcoreinit.OpRead, ID: open.ID, Wait: readWait}); err != nil {
			ans.close()
			return nil, err
		}
	}
	ans.take(r)
	return &http.Response{
		Status: fmt.Sprintf("%d %s", r.Status, http.StatusText(r.Status)), StatusCode: r.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: r.Header, Body: ans, ContentLength: -1, Request: req,
	}, nil
}

// answer is the body of a relayed answer, read in calls as its reader
// asks.
type answer struct {
	t    *relayTransport
	id   string
	ctx  context.Context
	body *bodySender

	mu     sync.Mutex
	buf    []byte
	off    int64 // the answer's bytes taken so far
	done   bool
	err    error
	closed bool
}

func (a *answer) take(r agentcoreinit.Reply) {
	a.buf = append(a.buf, r.Data...)
	a.off += int64(len(r.Data))
	a.done = r.Done
}

// Read implements io.Reader.
func (a *answer) Read(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.buf) == 0 {
		switch {
		case a.closed:
			return 0, errors.New("read of a closed body")
		case a.err != nil:
			return 0, a.err
		case a.done:
			return 0, io.EOF
		}
		r, err := a.t.call(a.ctx, agentcoreinit.Call{Op: agentcoreinit.OpRead, ID: a.id, Offset: a.off, Wait: readWait})
		if err != nil {
			a.err = err
			return 0, err
		}
		a.take(r)
	}
	n := copy(p, a.buf)
	a.buf = a.buf[n:]
	return n, nil
}

// Close implements io.Closer: a request whose answer was not all read
// is closed in the relay, in the background.
func (a *answer) Close() error {
	a.mu.Lock()
	done, closed := a.done, a.closed
	a.closed = true
	a.mu.Unlock()
	if a.body != nil {
		a.body.stop()
	}
	if !done && !closed {
		go a.close()
	}
	return nil
}

func (a *answer) close() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), callTimeout)
	defer cancel()
	_, _ = a.t.call(ctx, agentcoreinit.Call{Op: agentcoreinit.OpClose, ID: a.id})
}

// bodySender sends a streamed request body to the relay.
type bodySender struct {
	t      *relayTransport
	id     string
	pieces chan piece
	quit   chan struct{}
	once   sync.Once
	sent   int64 // bytes the relay was given
	src    io.ReadCloser
}

type piece struct {
	data []byte
	err  error // io.EOF at the end
}

func newBodySender(t *relayTransport, id string, body io.ReadCloser) *bodySender {
	b := &bodySender{t: t, id: id, pieces: make(chan piece), quit: make(chan struct{}), src: body}
	go b.pump()
	return b
}

// pump reads the body, as it comes, into pieces.
func (b *bodySender) pump() {
	defer close(b.pieces)
	buf := make([]byte, 256<<10)
	for {
		n, err := b.src.Read(buf)
		if n > 0 || err != nil {
			select {
			case b.pieces <- piece{data: append([]byte(nil), buf[:n]...), err: err}:
			case <-b.quit:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// gather waits for the first piece of body, then takes what follows
// within bodyGather: the body to send next, and whether it ends there.
func (b *bodySender) gather(ctx context.Context) ([]byte, bool, error) {
	var out []byte
	var timer <-chan time.Time
	for {
		select {
		case p, ok := <-b.pieces:
			if !ok {
				return out, true, nil
			}
			out = append(out, p.data...)
			if p.err != nil {
				if errors.Is(p.err, io.EOF) {
					return out, true, nil
				}
				return nil, false, fmt.Errorf("%s: relay: the request's body: %w", Name, p.err)
			}
			if len(out) >= maxBodyPiece {
				return out, false, nil
			}
			if timer == nil {
				timer = time.After(bodyGather)
			}
		case <-timer:
			return out, false, nil
		case <-b.quit:
			return nil, false, errors.New("the request ended")
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// spool puts data in a file of the session for call c to take.
func (b *bodySender) spool(ctx context.Context, c *agentcoreinit.Call, data []byte) error {
	name := "piece-" + newStreamID()
	if _, err := b.t.a.invoke(ctx, "relay body", b.t.session, types.ToolNameWriteFiles, &types.ToolArguments{
		Content: []types.InputContentBlock{{Path: aws.String(dir + "/" + name), Blob: data}},
	}); err != nil {
		return err
	}
	c.BodyFile = name
	return nil
}

// run sends the rest of the body, piece by piece, until its end.
func (b *bodySender) run(ctx context.Context) {
	for {
		data, eof, err := b.gather(ctx)
		if err != nil {
			return
		}
		for {
			c := agentcoreinit.Call{Op: agentcoreinit.OpWrite, ID: b.id, BodyOffset: b.sent, EOF: eof}
			if len(data) > agentcoreinit.MaxInline {
				if err := b.spool(ctx, &c, data); err != nil {
					return
				}
			} else {
				c.Body = data
			}
			r, err := b.t.call(ctx, c)
			if err != nil {
				return
			}
			took := r.BodyOffset - b.sent
			b.sent = r.BodyOffset
			if took >= int64(len(data)) {
				break
			}
			// The relay holds all it will of what the daemon has not
			// read: the rest goes again in a while.
			data = data[max(took, 0):]
			select {
			case <-time.After(100 * time.Millisecond):
			case <-b.quit:
				return
			case <-ctx.Done():
				return
			}
		}
		if eof {
			return
		}
	}
}

func (b *bodySender) stop() {
	b.once.Do(func() {
		close(b.quit)
		_ = b.src.Close()
	})
}
