package connflags

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"
)

// A name that does not resolve is said so, not as gRPC's "no children
// to pick from"; a server that does not answer keeps its hint. The
// lookup is a stand-in: tests ask no DNS server.
func TestDialError(t *testing.T) {
	grpcErr := errors.New("failed reaching server: last connection error: no children to pick from")
	notFound := func(context.Context, string) ([]string, error) {
		return nil, &net.DNSError{Err: "no such host", Name: "temporal.example", IsNotFound: true}
	}
	found := func(context.Context, string) ([]string, error) { return []string{"127.0.0.1"}, nil }
	for _, tt := range []struct {
		name     string
		hostPort string
		lookup   func(context.Context, string) ([]string, error)
		want     string
	}{
		{"no such host", "temporal.example:7233", notFound, `Unavailable: cannot resolve host "temporal.example" of the Temporal server's address temporal.example:7233 (--address, $TEMPORAL_ADDRESS): no such host`},
		{"resolves", "temporal.example:7233", found, "cannot reach the Temporal server at temporal.example:7233 (is berth dev running"},
		{"an address", "127.0.0.1:1", notFound, "cannot reach the Temporal server at 127.0.0.1:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := dialError(t.Context(), client.Options{HostPort: tt.hostPort}, grpcErr, tt.lookup)
			if !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %q, want it to start %q", err, tt.want)
			}
		})
	}
}
