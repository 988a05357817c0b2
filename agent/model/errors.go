package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"

	"github.com/openai/openai-go/v3"
	"go.temporal.io/sdk/temporal"
)

// failure is a call's failure, classified: one line, its type, when to
// retry.
type failure struct {
	msg        string
	typ        errdefs.Kind
	retryAfter time.Duration
}

func (f *failure) Error() string { return f.msg }

// describe classifies a failed call by the server's status: the one
// place errors from the model server are turned into berth's. midAnswer
// says that the answer had begun.
func (m *Model) describe(err error, midAnswer bool) *failure {
	host := m.cfg.host()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		f := &failure{typ: errdefs.ModelUnavailable}
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			f.msg = fmt.Sprintf("model: %s did not answer within %v", host, m.cfg.Timeout)
		case midAnswer:
			f.msg = fmt.Sprintf("model: the connection to %s was lost mid-answer: %s", host, oneLine(err.Error()))
		default:
			f.msg = fmt.Sprintf("model: %s unreachable: %s", host, oneLine(err.Error()))
		}
		return f
	}
	said := oneLine(apiErr.Message)
	if said == "" {
		said = http.StatusText(apiErr.StatusCode)
	}
	f := &failure{msg: fmt.Sprintf("model: %s answered %d: %s", host, apiErr.StatusCode, said)}
	switch code := apiErr.StatusCode; {
	case code == http.StatusTooManyRequests || code >= 500 || code == http.StatusRequestTimeout || code == http.StatusConflict:
		f.typ = errdefs.ModelUnavailable
		if apiErr.Response != nil {
			f.retryAfter = retryAfter(apiErr.Response.Header, time.Now())
		}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		f.typ = errdefs.ModelAuth
		f.msg += " (check OPENAI_API_KEY)"
	case code == http.StatusNotFound:
		f.typ = errdefs.NoModel
		f.msg += fmt.Sprintf(" (is %q, BERTH_MODEL, served there?)", m.cfg.Model)
	default:
		f.typ = errdefs.ModelRejected
	}
	return f
}

// toTemporal turns a failure into the activity's error.
func toTemporal(f *failure) error {
	return temporal.NewApplicationErrorWithOptions(f.msg, string(f.typ), temporal.ApplicationErrorOptions{
		NonRetryable:   f.typ != errdefs.ModelUnavailable,
		NextRetryDelay: f.retryAfter,
	})
}

// maxRetryAfter bounds the wait a server may ask for.
const maxRetryAfter = 10 * time.Minute

// retryAfter reads how long the server asks to wait: retry-after-ms
// (OpenAI's), else Retry-After in seconds or as a date. Zero: it did not
// say, and the retry policy's backoff applies.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		d = time.Duration(ms * float64(time.Millisecond))
	} else if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
			d = time.Duration(s * float64(time.Second))
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	return min(max(d, 0), maxRetryAfter)
}

// maxErrorLine bounds a line a server wrote that an error repeats.
const maxErrorLine = 512

// oneLine keeps the first line of a message, for one-line errors, cut
// to maxErrorLine bytes: what a server says enters history.
func oneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return cut(s, maxErrorLine)
}

// cut cuts s to at most n bytes of whole runes, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return prefix(s, n) + "..."
}

// prefix is the start of s, at most n bytes, ending with a whole rune.
func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// nonRetryable lists the kinds of the model activity's failures that a
// retry cannot fix, for its retry policy's NonRetryableErrorTypes: all
// but ModelUnavailable.
func nonRetryable() []string {
	var out []string
	for _, k := range []errdefs.Kind{errdefs.NoModel, errdefs.ModelAuth, errdefs.ModelRejected,
		errdefs.BadModelAnswer, errdefs.BadConversation, errdefs.AnswerTooLarge} {
		out = append(out, string(k))
	}
	return out
}
