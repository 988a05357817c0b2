package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	apiclient "github.com/daytonaio/daytona/libs/api-client-go"
	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/provider/internal/svcerr"
)

// Error is a call Daytona refused or could not answer. It wraps the
// errdefs kind the answer means, so errors.Is(err, errdefs.ErrQuota) and
// the like classify it, and its message is one line that never holds
// the API key.
type Error = svcerr.Error

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
	e := &Error{Service: Name, Op: op, Status: status, Message: svcerr.OneLine(svcerr.Scrub(msg, key))}
	if header != nil {
		e.RetryAfter = svcerr.RetryAfter(header, time.Now())
	}
	lower := strings.ToLower(e.Message)
	quota := false
	for _, q := range quotaMarkers {
		quota = quota || strings.Contains(lower, q)
	}
	switch {
	case status == 0 && (errors.Is(cause, context.Canceled) || errors.Is(cause, context.DeadlineExceeded)):
		e.Kind = errdefs.ErrProviderUnavailable
		if errors.Is(cause, context.Canceled) {
			e.Kind = errdefs.ErrCanceled
		}
	case status == 0:
		e.Kind = errdefs.ErrProviderUnavailable
	case status == http.StatusNotFound:
		e.Kind = errdefs.ErrNotFound
	case status == http.StatusUnauthorized || status == http.StatusForbidden && !quota:
		e.Kind = errdefs.ErrProviderAuth
	case quota && status < 500:
		e.Kind = errdefs.ErrQuota
	case status == http.StatusConflict:
		e.Kind = errdefs.ErrAlreadyExists
	case status == http.StatusTooManyRequests || status >= 500:
		e.Kind = errdefs.ErrProviderUnavailable
	default:
		e.Kind = errdefs.ErrBadInput
	}
	return e
}
