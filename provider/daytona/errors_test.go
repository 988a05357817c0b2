package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	sdkerrors "github.com/daytonaio/daytona/libs/sdk-go/pkg/errors"

	"github.com/berth-dev/berth/errdefs"
)

// TestClassify: Daytona's answers map to berth's kinds, each error one
// line with no key in it, a Retry-After kept.
func TestClassify(t *testing.T) {
	const key = "dtn_secret_key_123"
	retry := http.Header{"Retry-After": {"7"}}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"not found", sdkerrors.NewDaytonaNotFoundError("Sandbox with ID x not found", nil), errdefs.ErrNotFound},
		{"rate limit", sdkerrors.NewDaytonaRateLimitError("Too many requests", retry), errdefs.ErrProviderUnavailable},
		{"auth", sdkerrors.NewDaytonaError("Invalid credentials "+key, 401, nil), errdefs.ErrProviderAuth},
		{"forbidden", sdkerrors.NewDaytonaError("Forbidden", 403, nil), errdefs.ErrProviderAuth},
		{"quota", sdkerrors.NewDaytonaError("Total CPU limit exceeded. Maximum allowed: 4", 400, nil), errdefs.ErrQuota},
		{"conflict", sdkerrors.NewDaytonaError("Sandbox with name b-1 already exists", 409, nil), errdefs.ErrAlreadyExists},
		{"bad input", sdkerrors.NewDaytonaError("snapshot must be a string", 400, nil), errdefs.ErrBadInput},
		{"server", sdkerrors.NewDaytonaError("internal\nserver error", 503, retry), errdefs.ErrProviderUnavailable},
		{"no answer", sdkerrors.NewDaytonaError("dial tcp: connection refused", 0, nil), errdefs.ErrProviderUnavailable},
		{"timeout", sdkerrors.NewDaytonaTimeoutError("sandbox did not start"), errdefs.ErrProviderUnavailable},
		{"deadline", fmt.Errorf("Post: %w", context.DeadlineExceeded), errdefs.ErrProviderUnavailable},
	}
	for _, c := range cases {
		err := classify("create sandbox", c.err, key)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if s := err.Error(); strings.Contains(s, key) || strings.Contains(s, "\n") || !strings.HasPrefix(s, "daytona: create sandbox") {
			t.Errorf("%s: %q: want one line, prefixed, with no key", c.name, s)
		}
	}
	var e *Error
	if err := classify("op", sdkerrors.NewDaytonaRateLimitError("slow down", retry), key); !errors.As(err, &e) || e.RetryAfter != 7*time.Second {
		t.Errorf("Retry-After: %v, want 7s", err)
	}
	if got := message(`{"message":["name must be short","labels too many"],"statusCode":400}`); got != "name must be short; labels too many" {
		t.Errorf("message of a list: %q", got)
	}
}

// TestShellQuote: what Start assigns and runs reaches the command as it
// was, whatever it holds.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":     "plain",
		"":          "''",
		"a b":       "'a b'",
		"it's":      `'it'\''s'`,
		"$(rm -rf)": "'$(rm -rf)'",
		"/opt/x:1":  "/opt/x:1",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
	for _, bad := range []string{"", "1A", "A-B", "A B", "A=B"} {
		if validEnvName(bad) {
			t.Errorf("validEnvName(%q) = true", bad)
		}
	}
}

func TestSizes(t *testing.T) {
	if minutes(0) != 0 || minutes(time.Second) != 1 || minutes(time.Minute) != 1 || minutes(61*time.Second) != 2 {
		t.Error("minutes does not round up")
	}
	if gib(0) != 0 || gib(1) != 1 || gib(1<<30) != 1 || gib(1<<30+1) != 2 {
		t.Error("gib does not round up")
	}
	if ceilDiv(0.5, 1) != 1 || ceilDiv(2, 1) != 2 || ceilDiv(2.1, 1) != 3 {
		t.Error("ceilDiv does not round up")
	}
}
