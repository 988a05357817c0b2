package hostworker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/internal/testserver"
	"github.com/berth-dev/berth/provider/linux"
)

func TestMain(m *testing.M) {
	linux.Main()
	code := m.Run()
	if daemonBuild.dir != "" {
		os.RemoveAll(daemonBuild.dir)
	}
	os.Exit(code)
}

// server starts an embedded Temporal server for the test, with a client
// of it; both go when the test ends.
func server(t testing.TB) client.Client { return testserver.Client(t) }

// daemonBuild is berth's in-sandbox daemon, built once for the test
// binary: a world of every hosted provider's crash tests uploads it,
// and a build for each (some twenty) took a second or more of the CPU
// the tests share.
var daemonBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildDaemon returns berth's in-sandbox daemon, static, built on the
// first call: the docker and gvisor providers bind-mount it into their
// sandboxes, the hosted providers upload it. No test writes to it.
func buildDaemon(t testing.TB) string {
	t.Helper()
	daemonBuild.once.Do(func() {
		if daemonBuild.dir, daemonBuild.err = os.MkdirTemp("", "berth-hostworker-daemon-"); daemonBuild.err != nil {
			return
		}
		daemon := filepath.Join(daemonBuild.dir, "berth-sandboxd")
		build := exec.Command("go", "build", "-o", daemon, "github.com/berth-dev/berth/cmd/berth-sandboxd")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			daemonBuild.err = &buildError{err, out}
			return
		}
		daemonBuild.path = daemon
	})
	if daemonBuild.err != nil {
		t.Fatalf("build the daemon: %v", daemonBuild.err)
	}
	return daemonBuild.path
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + string(e.out) }
