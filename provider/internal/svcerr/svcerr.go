// Package svcerr is the error of a call a hosted sandbox service (E2B,
// Daytona, ...) refused or could not answer, as the providers over
// those services return it: one line, in berth's kinds, with no
// credential in it.
package svcerr

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Error is a call a service refused or could not answer. It wraps the
// errdefs kind the answer means, so errors.Is(err, errdefs.ErrQuota) and
// the like classify it, and its message is one line.
type Error struct {
	// Service names the service ("e2b"); Op the call ("create sandbox").
	Service, Op string
	// Status is the HTTP status the service answered, or 0 when no
	// answer came.
	Status int
	// Message is what the service said, cut to one bounded line (see
	// OneLine), and scrubbed of the key (Scrub).
	Message string
	// RetryAfter is how long the service asked to wait before the next
	// call (the Retry-After of a 429 or 503); zero when it did not say.
	RetryAfter time.Duration
	// Kind is the errdefs sentinel the answer means.
	Kind error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Service)
	b.WriteString(": ")
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
func (e *Error) Unwrap() error { return e.Kind }

// Bounds of what an error repeats of a service's answer: it may enter
// workflow history.
const (
	MaxLine       = 300
	MaxRetryAfter = 10 * time.Minute
)

// RetryAfter reads Retry-After, in seconds or as a date, at most
// MaxRetryAfter.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
			d = time.Duration(s * float64(time.Second))
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	return min(max(d, 0), MaxRetryAfter)
}

// OneLine keeps the first line of s, cut to MaxLine bytes of whole
// runes.
func OneLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.TrimSpace(s)
	if len(s) <= MaxLine {
		return s
	}
	n := MaxLine
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// Scrub removes key from s, should a server or proxy ever echo it.
func Scrub(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, "[redacted]")
	}
	return s
}
