package docker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/berth-dev/berth/provider"
)

// testImage is built from the host's Debian packages by
// testdata/build-image.sh.
const testImage = "berth-test:1"

// env is what the tests need from the machine: a daemon binary, an
// engine, the test image. unavailable says why they cannot run.
var testEnv struct {
	daemon      string
	unavailable string
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(child(dir, os.Args[len(os.Args)-1]))
	}
	dir, err := os.MkdirTemp("", "berth-docker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		testEnv.unavailable = setUp(dir)
		return m.Run()
	}()
	os.Exit(code)
}

// childEnv, when set, makes the test binary another process on the host
// (see TestOtherProcess): it opens the provider on the state directory
// the variable names, runs echo in the sandbox its last argument names,
// and prints the output.
const childEnv = "BERTH_DOCKER_TEST_CHILD"

func child(dir, id string) int {
	ctx := context.Background()
	p, err := provider.Open(ctx, Name, provider.Config{"state-dir": dir, "daemon": os.Getenv(childEnv + "_DAEMON"), "image": testImage})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sb, err := p.Get(ctx, id)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := sb.Exec(ctx, provider.ExecRequest{Argv: []string{"cat", "hello"}, Stdout: os.Stdout}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// setUp builds the daemon and the test image, and returns why tests
// cannot run, or "".
func setUp(dir string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return "docker client: " + err.Error()
	}
	defer cli.Close()
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		return "the Docker engine is unreachable: " + err.Error()
	}
	testEnv.daemon = filepath.Join(dir, DaemonName)
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", testEnv.daemon, "github.com/berth-dev/berth/cmd/berth-sandboxd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build berth-sandboxd: %v\n%s", err, out)
		os.Exit(1)
	}
	if out, err := exec.CommandContext(ctx, "testdata/build-image.sh", testImage).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the test image: %v\n%s", err, out)
		os.Exit(1)
	}
	return ""
}

// needDocker skips a test, saying why, on a machine without an engine.
func needDocker(t testing.TB) {
	t.Helper()
	if testEnv.unavailable != "" {
		t.Skip("skipped: " + testEnv.unavailable)
	}
}

// newTestProvider opens a provider on a fresh state directory, closed
// when the test ends.
func newTestProvider(t testing.TB, cfg Config) *Provider {
	t.Helper()
	needDocker(t)
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.DaemonPath == "" {
		cfg.DaemonPath = testEnv.daemon
	}
	if cfg.Image == "" {
		cfg.Image = testImage
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var inspectOpts = client.ContainerInspectOptions{}
