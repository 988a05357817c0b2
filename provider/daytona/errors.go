package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"

	"github.com/berth-dev/berth/errdefs"
)

// Error is a call Daytona refused or could not answer. It wraps the
// errdefs kind the answer means, so errors.Is(err, errdefs.ErrQuota) and
// the like classify it, and its message is one line that never holds
// the API key.
type Error struct {
	// Op names the call ("create sandbox").
	Op string
	// Status is the HTTP status Daytona answered, or 0 when no answer
	// came.
	Status int
	// Message is what Daytona said, cut to one bounded line.
	Message string
	// RetryAfter is how long Daytona asked to wait (the Retry-After of
	// a 429 or 503); zero when it did not say.
	RetryAfter time.Duration

	kind error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("daytona: ")
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

// Bounds of what an error repeats of Daytona's answer.
const (
	maxErrorLine  = 300
	maxRetryAfter = 10 * time.Minute
)

// quotaMarkers are how Daytona words a refusal for the organization's
// limits ("Total CPU limit exceeded. Maximum allowed: 10", "... quota").
var quotaMarkers = []string{"limit exceeded", "quota"}

// classify turns an error of the SDK into an Error of berth's kinds.
func classify(op string, err error, key string) error {
	if err == nil {
		return nil
	}
	var (
		status int
		msg    string
		header http.Header
	)
	var nf *sdkerrors.DaytonaNotFoundError
	var rl *sdkerrors.DaytonaRateLimitError
	var to *sdkerrors.DaytonaTimeoutError
	var de *sdkerrors.DaytonaError
	switch {
	case errors.As(err, &nf):
		status, msg, header = http.StatusNotFound, nf.Message, nf.Headers
	case errors.As(err, &rl):
		status, msg, header = http.StatusTooManyRequests, rl.Message, rl.Headers
	case errors.As(err, &to):
		msg = to.Message
	case errors.As(err, &de):
		status, msg, header = de.StatusCode, de.Message, de.Headers
	default:
		msg = err.Error()
	}
	return newError(op, status, message(msg), header, key, err)
}

// classifyAPI turns an error of the API client, with the answer that
// came (or nil), into an Error of berth's kinds.
func classifyAPI(op string, err error, resp *http.Response, key string) error {
	if err == nil {
		return nil
	}
	var gen *apiclient.GenericOpenAPIError
	msg := err.Error()
	if errors.As(err, &gen) && len(gen.Body()) > 0 {
		msg = message(string(gen.Body()))
	}
	if resp == nil {
		return newError(op, 0, msg, nil, key, err)
	}
	return newError(op, resp.StatusCode, msg, resp.Header, key, err)
}

// message is what an error answer says: its JSON message, else its text.
func message(body string) string {
	var v struct {
		Message json.RawMessage `json:"message"`
		Error   string          `json:"error"`
	}
	if json.Unmarshal([]byte(body), &v) == nil {
		var s string
		if json.Unmarshal(v.Message, &s) == nil && s != "" {
			return s
		}
		var list []string
		if json.Unmarshal(v.Message, &list) == nil && len(list) > 0 {
			return strings.Join(list, "; ")
		}
		if v.Error != "" {
			return v.Error
		}
	}
	return body
}

func newError(op string, status int, msg string, header http.Header, key string, cause error) error {
	e := &Error{Op: op, Status: status, Message: oneLine(scrub(msg, key))}
	if header != nil {
		e.RetryAfter = retryAfter(header, time.Now())
	}
	lower := strings.ToLower(e.Message)
	quota := false
	for _, q := range quotaMarkers {
		quota = quota || strings.Contains(lower, q)
	}
	switch {
	case status == 0 && (errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded)):
		e.kind = errdefs.ErrProviderUnavailable
		if errors.Is(cause, context.Canceled) {
			e.kind = errdefs.ErrCanceled
		}
	case status == 0:
		e.kind = errdefs.ErrProviderUnavailable
	case status == http.StatusNotFound:
		e.kind = errdefs.ErrNotFound
	case status == http.StatusUnauthorized || status == http.StatusForbidden && !quota:
		e.kind = errdefs.ErrProviderAuth
	case quota && status < 500:
		e.kind = errdefs.ErrQuota
	case status == http.StatusConflict:
		e.kind = errdefs.ErrAlreadyExists
	case status == http.StatusTooManyRequests || status >= 500:
		e.kind = errdefs.ErrProviderUnavailable
	default:
		e.kind = errdefs.ErrBadInput
	}
	return e
}

// scrub removes the key from s.
func scrub(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[key]")
}

// oneLine is s on one line, bounded.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxErrorLine {
		s = s[:maxErrorLine] + "..."
	}
	return s
}

// retryAfter is the wait a Retry-After header asks for (seconds or a
// date), bounded; zero when there is none.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		return min(max(time.Duration(n)*time.Second, 0), maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}
