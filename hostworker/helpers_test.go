package hostworker_test

import (
	"log/slog"
	"os"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/devserver"
	"github.com/berth-dev/berth/hostworker"
	"github.com/berth-dev/berth/provider/linux"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

// server starts an embedded Temporal server for the test, with a client
// of it; both go when the test ends.
func server(t testing.TB) client.Client {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	srv, err := devserver.Start(t.Context(), devserver.Options{DataDir: t.TempDir(), Address: "127.0.0.1:0", Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	opts := srv.ClientOptions()
	opts.Logger = hostworker.Logger(logger)
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
