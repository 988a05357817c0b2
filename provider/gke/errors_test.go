package gke

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"

	"github.com/berth-dev/berth/errdefs"
)

// TestClassify: the API server's and the runtime's answers map to
// berth's kinds, one line, with no token, a Retry-After kept.
func TestClassify(t *testing.T) {
	const token = "secret-bearer-token-123"
	gr := schema.GroupResource{Group: "extensions.agents.x-k8s.io", Resource: "sandboxclaims"}
	gk := schema.GroupKind{Group: gr.Group, Kind: "SandboxClaim"}
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"not found", apierrors.NewNotFound(gr, "x"), errdefs.ErrNotFound},
		{"unauthorized", apierrors.NewUnauthorized("token " + token + " rejected"), errdefs.ErrProviderAuth},
		{"forbidden", apierrors.NewForbidden(gr, "x", errors.New("user cannot create")), errdefs.ErrProviderAuth},
		{"quota", apierrors.NewForbidden(gr, "x", errors.New("exceeded quota: q, requested: count/sandboxclaims=1")), errdefs.ErrQuota},
		{"too many", apierrors.NewTooManyRequests("slow\ndown", 7), errdefs.ErrProviderUnavailable},
		{"invalid", apierrors.NewInvalid(gk, "x", nil), errdefs.ErrBadInput},
		{"bad request", apierrors.NewBadRequest("no"), errdefs.ErrBadInput},
		{"exists", apierrors.NewAlreadyExists(gr, "x"), errdefs.ErrAlreadyExists},
		{"conflict", apierrors.NewConflict(gr, "x", errors.New("modified")), errdefs.ErrProviderUnavailable},
		{"server", apierrors.NewInternalError(errors.New("etcd")), errdefs.ErrProviderUnavailable},
		{"unavailable", apierrors.NewServiceUnavailable("down"), errdefs.ErrProviderUnavailable},
		{"timeout", apierrors.NewTimeoutError("slow", 2), errdefs.ErrProviderUnavailable},
		{"no answer", fmt.Errorf("dial tcp: connection refused"), errdefs.ErrProviderUnavailable},
		{"deadline", fmt.Errorf("Post: %w", context.DeadlineExceeded), errdefs.ErrProviderUnavailable},
		{"canceled", fmt.Errorf("Post: %w", context.Canceled), errdefs.ErrCanceled},
		{"runtime 502", fmt.Errorf("run: %w", &sandbox.HTTPError{StatusCode: 502, Body: "no backend"}), errdefs.ErrProviderUnavailable},
		{"runtime 403", fmt.Errorf("write: %w", &sandbox.HTTPError{StatusCode: 403, Body: "Access denied"}), errdefs.ErrProviderAuth},
		{"runtime 422", fmt.Errorf("run: %w", &sandbox.HTTPError{StatusCode: 422, Body: "command required"}), errdefs.ErrBadInput},
	}
	for _, c := range cases {
		err := classify("create claim", c.err, token)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if s := err.Error(); strings.Contains(s, token) || strings.Contains(s, "\n") || !strings.HasPrefix(s, "gke: create claim") {
			t.Errorf("%s: %q: want one line, prefixed, with no token", c.name, s)
		}
	}
	var e *Error
	if err := classify("op", apierrors.NewTooManyRequests("slow", 7), token); !errors.As(err, &e) || e.RetryAfter != 7*time.Second {
		t.Errorf("Retry-After: %v, want 7s", err)
	}
}

// TestQuote: what Start and Upload send is split by the runtime's shlex
// into the argv it was.
func TestQuote(t *testing.T) {
	for in, want := range map[string]string{"plain": "plain", "": "''", "a b": "'a b'", "it's": `'it'"'"'s'`} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
	if claimName("berth-ok-1") != "berth-ok-1" || claimName("Berth_X") == "Berth_X" || !strings.HasPrefix(claimName("Berth_X"), "berth-") {
		t.Error("claimName")
	}
}
