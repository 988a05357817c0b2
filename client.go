package berth

import (
	"github.com/berth-dev/berth/internal/randid"

	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultRetryFor is how long an operation waits for an unavailable
// server by default.
const DefaultRetryFor = 2 * time.Minute

// Client drives berth's workflows through a Temporal client.
type Client struct {
	temporal client.Client
	retryFor time.Duration
	onWait   func(error)
	http     *http.Client
	// notSignable: the workflows whose workers sign no URLs.
	notSignable notSignable
	// gone is set once the server has not answered for retryFor: later
	// operations (an upload's cleanup) fail at once rather than wait
	// again.
	gone atomic.Bool
	// tracer is WithTracing's, for Dial.
	tracer trace.TracerProvider
}

// Option configures a Client.
type Option func(*Client)

// WithRetryFor bounds how long an operation waits for an unavailable
// server before it fails; zero means DefaultRetryFor, a negative value
// not at all.
func WithRetryFor(d time.Duration) Option { return func(c *Client) { c.retryFor = d } }

// OnWait is called, once per outage, when an operation starts waiting
// for an unavailable server (to tell a user why nothing happens).
func OnWait(f func(err error)) Option { return func(c *Client) { c.onWait = f } }

// New makes a Client over a Temporal client, which the caller closes.
func New(c client.Client, opts ...Option) *Client {
	cl := &Client{temporal: c, retryFor: DefaultRetryFor, http: &http.Client{Timeout: directTimeout}}
	for _, o := range opts {
		o(cl)
	}
	if cl.retryFor == 0 {
		cl.retryFor = DefaultRetryFor
	}
	return cl
}

// Temporal is the Temporal client underneath.
func (c *Client) Temporal() client.Client { return c.temporal }

// UnavailableError is an operation given up on because the server was
// unavailable for longer than the client's RetryFor.
type UnavailableError struct {
	// Op is what was being done ("exec on sbx-1").
	Op string
	// MayHaveRun says the operation may have run, or be running: it was
	// sent before the server went away. Its result can then be had with
	// ResultHint.
	MayHaveRun bool
	// ResultHint says how to see the operation's result, or is empty.
	ResultHint string
	// Err is the last failure to reach the server.
	Err error
}

// Error says what was given up on and whether it may have run.
func (e *UnavailableError) Error() string {
	msg := fmt.Sprintf("%s: the Temporal server has been unavailable too long", e.Op)
	if e.MayHaveRun {
		msg += "; the operation may have run"
		if e.ResultHint != "" {
			msg += " (" + e.ResultHint + ")"
		}
	} else {
		msg += "; the operation did not run"
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the last failure to reach the server.
func (e *UnavailableError) Unwrap() error { return e.Err }

// retry runs call until it succeeds, fails for another reason than an
// unavailable server, or the server has been unavailable for longer than
// retryFor. The clock starts at the first failure, not at the start: a
// command may legitimately run for hours.
//
// A call may also hang rather than fail while the server is away: the
// SDK retries some calls itself, and a long poll cannot tell a slow
// answer from a server gone. So while call runs, the server's health is
// asked every second; once it has not answered for retryFor, call's
// context is canceled and retry fails as unavailable.
func (c *Client) retry(ctx context.Context, call func(ctx context.Context) error) error {
	var (
		since time.Time
		wait  = 100 * time.Millisecond
		told  sync.Once // the user is told of an outage once, by the loop or the watch
	)
	tell := func(err error) {
		if c.onWait != nil {
			told.Do(func() { c.onWait(err) })
		}
	}
	if c.gone.Load() {
		return fmt.Errorf("%w for %v", errServerGone, c.retryFor.Round(time.Second))
	}
	wctx, stop := c.watchServer(ctx, tell)
	defer stop()
	for {
		start := time.Now()
		err := call(wctx)
		if gone := context.Cause(wctx); ctx.Err() == nil && errors.Is(gone, errServerGone) {
			return gone
		}
		if err == nil || !temporalerr.ServerUnavailable(err) || ctx.Err() != nil || c.retryFor < 0 {
			if ctx.Err() != nil && err != nil {
				return ctx.Err()
			}
			return err
		}
		// A call that failed after a long while had reached the server:
		// this is a new outage, with a clock of its own.
		if since.IsZero() || time.Since(start) > 5*time.Second {
			since = time.Now()
		}
		if time.Since(since) > c.retryFor {
			return err
		}
		tell(err)
		select {
		case <-wctx.Done():
		case <-time.After(wait):
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// errServerGone is the cause of a call's context canceled because the
// server did not answer a health check for the client's RetryFor.
var errServerGone = status.Error(codes.Unavailable, "the Temporal server did not answer")

// healthEvery is how often a waiting operation asks for the server's
// health, and healthTimeout how long each answer may take.
const (
	healthEvery   = 500 * time.Millisecond
	healthTimeout = time.Second
)

// watchServer returns a context derived from ctx that is canceled, with
// errServerGone as its cause, once the server has failed every health
// check for longer than the client's RetryFor; waiting is told of the
// first failure. stop ends the watch.
func (c *Client) watchServer(ctx context.Context, waiting func(error)) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	if c.retryFor < 0 || c.temporal == nil {
		return wctx, func() { cancel(nil) }
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(healthEvery)
		defer tick.Stop()
		var since time.Time
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			hctx, hcancel := context.WithTimeout(wctx, healthTimeout)
			_, err := c.temporal.CheckHealth(hctx, &client.CheckHealthRequest{})
			hcancel()
			switch {
			case err == nil:
				since = time.Time{}
			case wctx.Err() != nil:
				return
			case since.IsZero():
				since = time.Now()
				waiting(err)
			case time.Since(since) > c.retryFor:
				c.gone.Store(true)
				cancel(fmt.Errorf("%w for %v: %v", errServerGone, c.retryFor.Round(time.Second), err))
				return
			}
		}
	}()
	return wctx, func() {
		close(done)
		cancel(nil)
	}
}

// Retry runs call as every operation of the client does: again while the
// server is unavailable, for at most the client's RetryFor.
func (c *Client) Retry(ctx context.Context, call func(ctx context.Context) error) error {
	return c.unavailable(c.retry(ctx, call), "request", true, "")
}

// NewID returns a fresh id with a prefix, for Updates and workflows.
func NewID(prefix string) string { return prefix + randid.Hex(8) }
