package hostworker_test

import (
	"os"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/provider/linux"
)

func TestMain(m *testing.M) {
	linux.Main()
	code := m.Run()
	daemonBuild.Remove()
	os.Exit(code)
}

// server starts an embedded Temporal server for the test, with a client
// of it; both go when the test ends.
func server(t testing.TB) client.Client { return testserver.Client(t) }

// daemonBuild is berth's in-sandbox daemon, built once for the test
// binary: the docker and gvisor providers bind-mount it into their
// sandboxes, and a world of every hosted provider's crash tests uploads
// it (some twenty builds, each a second or more of the CPU the tests
// share). No test writes to it.
var daemonBuild = &testkit.Command{Package: "github.com/berth-dev/berth/cmd/berth-sandboxd", Name: "berth-sandboxd"}

func buildDaemon(t testing.TB) string { return daemonBuild.Path(t) }
