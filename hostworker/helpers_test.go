package hostworker_test

import (
	"os"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/provider/linux"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

// server starts an embedded Temporal server for the test, with a client
// of it; both go when the test ends.
func server(t testing.TB) client.Client { return testserver.Client(t) }
