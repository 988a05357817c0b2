package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
)

// Error is a call E2B refused or could not answer. It wraps the errdefs
// kind the answer means, so errors.Is(err, errdefs.ErrQuota) and the like
// classify it, and its message is one line that never holds the API key.
type Error = svcerr.Error

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 8 << 10

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
	e := &Error{Service: "e2b", Op: op, Status: resp.StatusCode, Message: c.scrub(oneLine(msg))}
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests && strings.Contains(msg, quotaMarker):
		e.Kind = errdefs.ErrQuota
	case code == http.StatusTooManyRequests || code >= 500 || code == http.StatusRequestTimeout:
		e.Kind = errdefs.ErrProviderUnavailable
		e.RetryAfter = svcerr.RetryAfter(resp.Header, time.Now())
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		e.Kind = errdefs.ErrProviderAuth
	case code == http.StatusNotFound:
		e.Kind = errdefs.ErrNotFound
	default:
		e.Kind = errdefs.ErrBadInput
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
	return &Error{Service: "e2b", Op: op, Message: c.scrub(oneLine(err.Error())), Kind: errdefs.ErrProviderUnavailable}
}

// scrub removes the API key from s, should a server or proxy ever echo it.
func (c *Client) scrub(s string) string { return svcerr.Scrub(s, c.key) }

// oneLine keeps the first line of s, bounded: what a server says may
// enter workflow history.
func oneLine(s string) string { return svcerr.OneLine(s) }

// IsRetryable reports whether err is worth retrying (its kind is
// errdefs.ErrProviderUnavailable).
func IsRetryable(err error) bool { return errors.Is(err, errdefs.ErrProviderUnavailable) }
