package linux

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

func TestMain(m *testing.M) {
	Main()
	code := m.Run()
	if daemonBuild.dir != "" {
		os.RemoveAll(daemonBuild.dir)
	}
	os.Exit(code)
}

// daemonBuild is berth-sandboxd built once for the tests and
// benchmarks that run on it.
var daemonBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildDaemon returns berth-sandboxd built static, as
// docs/providers/README.md installs it, once for the whole run.
func buildDaemon(t testing.TB) string {
	t.Helper()
	daemonBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "berth-sandboxd-")
		if err != nil {
			daemonBuild.err = err
			return
		}
		daemonBuild.dir = dir
		bin := filepath.Join(dir, DaemonName)
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/berth-dev/berth/cmd/berth-sandboxd")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			daemonBuild.err = fmt.Errorf("build %s: %v\n%s", DaemonName, err, out)
			return
		}
		daemonBuild.path = bin
	})
	if daemonBuild.err != nil {
		t.Fatal(daemonBuild.err)
	}
	return daemonBuild.path
}

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
