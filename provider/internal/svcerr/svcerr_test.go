package svcerr

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/berth-dev/berth/errdefs"
)

func TestError(t *testing.T) {
	e := &Error{Service: "svc", Op: "create", Status: 429, Message: "slow down", RetryAfter: 3 * time.Second, Kind: errdefs.ErrProviderUnavailable}
	if got, want := e.Error(), "svc: create: 429 Too Many Requests: slow down (retry after 3s)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, errdefs.ErrProviderUnavailable) {
		t.Error("the kind does not unwrap")
	}
}

func TestOneLine(t *testing.T) {
	if got := OneLine("  first\nsecond"); got != "first" {
		t.Errorf("OneLine kept %q", got)
	}
	long := strings.Repeat("é", MaxLine)
	got := OneLine(long)
	if len(got) > MaxLine+3 || !utf8.ValidString(got) {
		t.Errorf("OneLine of %d bytes: %d bytes, valid UTF-8 %v", len(long), len(got), utf8.ValidString(got))
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Now()
	for v, want := range map[string]time.Duration{
		"":    0,
		"7":   7 * time.Second,
		"-1":  0,
		"1e9": MaxRetryAfter,
		now.Add(90 * time.Second).UTC().Format(http.TimeFormat): 89 * time.Second,
	} {
		got := RetryAfter(http.Header{"Retry-After": {v}}, now)
		if got < want-time.Second || got > want+time.Second {
			t.Errorf("Retry-After %q: %v, want %v", v, got, want)
		}
	}
	if Scrub("key k3y there", "k3y") != "key [redacted] there" {
		t.Error("Scrub")
	}
}
