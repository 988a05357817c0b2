package linux

import (
	"bytes"
	"os"
	"testing"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/internal/sandboxtest"
)

// newTestProvider opens a provider on a short state directory: its
// socket paths must fit in a unix socket address.
func newTestProvider(t testing.TB) *Provider {
	t.Helper()
	// BERTH_TEST_DAEMON runs the daemon from another binary that calls
	// Main, to measure how the binary's size shows in the daemon.
	p, err := New(Config{StateDir: shortTempDir(t), DaemonPath: os.Getenv("BERTH_TEST_DAEMON")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyAll(t, p) })
	return p
}

// destroyAll destroys what a test left, and closes the provider.
func destroyAll(t testing.TB, p *Provider) {
	sandboxtest.DestroyAll(t, p)
	p.Close()
}

// shortTempDir makes a state directory short enough for socket paths and
// searchable by the sandboxes' ids.
func shortTempDir(t testing.TB) string {
	t.Helper()
	return sandboxtest.SearchableTempDir(t, "berth")
}

func TestSmoke(t *testing.T) {
	p := newTestProvider(t)
	sb, err := p.Create(t.Context(), provider.Spec{ID: "smoke"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(t.Context())
	var out, errb bytes.Buffer
	res, err := sb.Exec(t.Context(), provider.ExecRequest{Shell: "id; pwd; hostname; ls /; echo $PATH", Stdout: &out, Stderr: &errb})
	t.Logf("res=%+v err=%v\nstdout:\n%s\nstderr:\n%s", res, err, out.String(), errb.String())
	if err != nil || res.ExitCode != 0 {
		t.Fatal("exec failed")
	}
}
