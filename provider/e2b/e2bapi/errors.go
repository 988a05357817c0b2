package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"
)

// Error is a call E2B refused or could not answer. It wraps the errdefs
// kind the answer means, so errors.Is(err, errdefs.ErrQuota) and the like
// classify it, and its message is one line that never holds the API key.
type Error struct {
	// Op names the call ("create sandbox").
	Op string
	// Status is the HTTP status E2B answered, or 0 when no answer came.
	Status int
	// Message is what E2B said, cut to one bounded line.
	Message string
	// RetryAfter is how long E2B asked to wait before the next call (the
	// Retry-After of a 429 or 503); zero when it did not say.
	RetryAfter time.Duration

	kind error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("e2b: ")
	b.WriteString(e.Op)
	if e.Status != 0 {
		fmt.Fprintf(&b, ": %d %s", e.Status, http.StatusText(e.Status))
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	return b.String()
}

// Unwrap returns the errdefs kind.
func (e *Error) Unwrap() error { return e.kind }

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 8 << 10

// maxErrorLine bounds the part of E2B's message an error repeats.
const maxErrorLine = 300

// maxRetryAfter bounds the wait E2B may ask for.
const maxRetryAfter = 10 * time.Minute

// quotaMarker is how E2B words a refusal for the account's concurrency
// limit (a 429, as a rate limit is): packages/api/internal/orchestrator/create_instance.go.
const quotaMarker = "maximum number of concurrent"

// statusError reads an error answer (the spec's Error{code, message}, or
// text) and classifies it by status.
func (c *Client) statusError(op string, resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := string(body)
	var apiErr struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &apiErr) == nil && apiErr.Message != "" {
		msg = apiErr.Message
	}
	e := &Error{Op: op, Status: resp.StatusCode, Message: c.scrub(oneLine(msg))}
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests && strings.Contains(msg, quotaMarker):
		e.kind = errdefs.ErrQuota
	case code == http.StatusTooManyRequests || code >= 500 || code == http.StatusRequestTimeout:
		e.kind = errdefs.ErrProviderUnavailable
		e.RetryAfter = retryAfter(resp.Header, time.Now())
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		e.kind = errdefs.ErrProviderAuth
	case code == http.StatusNotFound:
		e.kind = errdefs.ErrNotFound
	default:
		e.kind = errdefs.ErrBadInput
	}
	return e
}

// transportError classifies a call that got no answer: the caller's own
// cancellation stays what it is, anything else (a refused or dropped
// connection, a timeout) is the service out of reach, and retried.
func (c *Client) transportError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("e2b: %s: %w", op, ctxErr)
	}
	return &Error{Op: op, Message: c.scrub(oneLine(err.Error())), kind: errdefs.ErrProviderUnavailable}
}

// scrub removes the API key from s, should a server or proxy ever echo it.
func (c *Client) scrub(s string) string {
	if c.key != "" {
		s = strings.ReplaceAll(s, c.key, "[redacted]")
	}
	return s
}

// retryAfter reads Retry-After, in seconds or as a date.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
			d = time.Duration(s * float64(time.Second))
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	return min(max(d, 0), maxRetryAfter)
}

// oneLine keeps the first line of s, cut to maxErrorLine bytes of whole
// runes: what a server says may enter workflow history.
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.TrimSpace(s)
	if len(s) <= maxErrorLine {
		return s
	}
	n := maxErrorLine
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// IsRetryable reports whether err is worth retrying (its kind is
// errdefs.ErrProviderUnavailable).
func IsRetryable(err error) bool { return errors.Is(err, errdefs.ErrProviderUnavailable) }
