// Package testserver starts the embedded Temporal server for a test. It
// is apart from berthtest so that tests which need no server do not link
// it.
package testserver

import (
	"log/slog"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/berth-dev/berth/devserver"
)

// Client starts an embedded Temporal server in a temporary directory and
// returns a client of it; both go when the test ends.
func Client(t testing.TB) client.Client {
	t.Helper()
	c, err := client.Dial(Options(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Options starts an embedded Temporal server as Client does, and returns
// the options of a client of it, for a test that dials its own (with
// interceptors, a metrics handler).
func Options(t testing.TB) client.Options {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	srv, err := devserver.Start(t.Context(), devserver.Options{DataDir: t.TempDir(), Address: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	opts := srv.ClientOptions()
	opts.Logger = log.NewStructuredLogger(logger)
	return opts
}
