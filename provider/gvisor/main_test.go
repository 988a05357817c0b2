package gvisor

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/berth-dev/berth/provider/gvisor/gvisorinit"
	"github.com/berth-dev/berth/provider/linux"
)

// unavailable says why the tests cannot run on this machine, or is "".
var unavailable string

func TestMain(m *testing.M) {
	gvisorinit.Main() // the test binary is the sandboxes' daemon
	linux.Main()      // and the linux provider's, which benchmarks compare with
	if arg := os.Getenv(childEnv); arg != "" {
		os.Exit(child(arg))
	}
	switch {
	case os.Geteuid() != 0:
		unavailable = "the gvisor provider needs root"
	default:
		if _, err := exec.LookPath("runsc"); err != nil {
			unavailable = "runsc is not installed (.ci/run installs it): " + err.Error()
		}
	}
	if unavailable != "" {
		fmt.Fprintln(os.Stderr, "provider/gvisor: tests skip:", unavailable)
	}
	os.Exit(m.Run())
}

// newTestProvider opens a provider on a fresh state directory, closed
// when the test ends, or skips the test saying why it cannot.
func newTestProvider(t testing.TB, cfg Config) *Provider {
	t.Helper()
	if unavailable != "" {
		t.Skip("skipped: " + unavailable)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
