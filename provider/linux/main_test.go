package linux

import (
	"os"
	"testing"

	"github.com/berth-dev/berth/internal/testkit"
)

func TestMain(m *testing.M) {
	Main()
	code := m.Run()
	daemonBuild.Remove()
	os.Exit(code)
}

// daemonBuild is berth-sandboxd built static, as
// docs/providers/README.md installs it, once for the tests and
// benchmarks that run on it.
var daemonBuild = &testkit.Command{
	Package: "github.com/berth-dev/berth/cmd/berth-sandboxd", Name: DaemonName,
	Flags: []string{"-trimpath", "-ldflags=-s -w"},
}

func buildDaemon(t testing.TB) string { return daemonBuild.Path(t) }

// benchDaemon is the daemon benchmarks run on: berth-sandboxd, as an
// installed berth runs, not the test binary, whose packages' memory
// and collector would be measured with it. BERTH_TEST_DAEMON names
// another binary, to compare two builds in one run.
func benchDaemon(b *testing.B) string {
	if d := os.Getenv("BERTH_TEST_DAEMON"); d != "" {
		return d
	}
	return buildDaemon(b)
}
