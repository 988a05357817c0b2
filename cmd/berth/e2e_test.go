package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider/linux"
)

// build compiles berth and berth-sandboxd side by side, as installed,
// once for all the package's tests.
func build(t *testing.T) string { return berthBinary(t) }

// devDefaults are flags every berth dev of the tests starts with, before
// a test's own: docker's default image is the test image, so that no
// berth dev makes its own from the host's files (provider/docker's and
// hostworker's tests do, under tags of their own, which they remove).
var devDefaults = []string{"--provider-config", "docker.image=" + testImage}

// startDev starts berth dev on port (or, when port is 0, on a free one,
// trying another when a port found free is taken before berth dev binds
// it) and waits until it is ready.
func startDev(t testing.TB, berth, data string, port int, log *testkit.SyncBuffer, flags ...string) (*exec.Cmd, int) {
	t.Helper()
	return startDevEnv(t, nil, berth, data, port, log, flags...)
}

// startDevEnv is startDev with env added to berth dev's environment:
// a parallel test cannot t.Setenv.
func startDevEnv(t testing.TB, env []string, berth, data string, port int, log *testkit.SyncBuffer, flags ...string) (*exec.Cmd, int) {
	t.Helper()
	flags = append(slices.Clip(devDefaults), flags...)
start:
	for attempt := 0; ; attempt++ {
		p := port
		if p == 0 {
			p = testkit.FreePort(t)
		}
		dev := exec.Command(berth, append([]string{"dev", "--data-dir", data, "--port", fmt.Sprint(p), "--ui-port", "0"}, flags...)...)
		dev.Stdout, dev.Stderr = log, log
		if env != nil {
			dev.Env = append(os.Environ(), env...)
		}
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { dev.Wait(); close(exited) }()
		deadline := time.After(60 * time.Second)
		for !strings.Contains(log.String(), "berth dev is ready") {
			select {
			case <-exited:
				if port == 0 && attempt < 3 {
					continue start
				}
				t.Fatalf("berth dev exited:\n%s", log.String())
			case <-deadline:
				t.Fatalf("berth dev did not come up:\n%s", log.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		return dev, p
	}
}

// commandTimeout bounds every berth command a test runs to the end, so
// that a command that hangs fails its test, saying which command it was,
// instead of the whole package at its timeout.
const commandTimeout = 3 * time.Minute

// runBerth runs the berth binary and returns what it printed and its
// exit code.
func runBerth(t testing.TB, berth string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e testkit.SyncBuffer
	code = runCommand(t, berth, args, &o, &e)
	return o.String(), e.String(), code
}

// runCommand runs berth with args, its output going to stdout and
// stderr, and returns its exit code; it fails the test if berth runs
// longer than commandTimeout.
func runCommand(t testing.TB, berth string, args []string, stdout io.Writer, stderr *testkit.SyncBuffer) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, berth, args...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = stdout, stderr, t.TempDir()
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("berth %s: still running after %v, killed; stderr %q", strings.Join(args, " "), commandTimeout, stderr.String())
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0
}

// dataDir makes a data directory for berth dev, short enough to keep
// sandbox paths readable.
func dataDir(t testing.TB) string {
	t.Helper()
	data, err := os.MkdirTemp("", "berth-e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		destroyLeftovers(t, data)
		os.RemoveAll(data)
	})
	return data
}

// TestDevAndRun starts berth dev and runs one-shot jobs against it with
// berth run, checking what a user sees: output, exit codes, one-line
// reasons.
func TestDevAndRun(t *testing.T) {
	// A model server named without a model: berth dev says so.
	t.Setenv("BERTH_MODEL", "")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		return runBerth(t, berth, append([]string{"run", "--address", addr}, args...)...)
	}

	src := filepath.Join(t.TempDir(), "job.py")
	os.WriteFile(src, []byte("import os, sys\nprint('hello', os.environ['WHO'])\nprint('oops', file=sys.stderr)\nsys.exit(5)\n"), 0o644)
	tests := []struct {
		name           string
		args           []string
		stdout, stderr string
		code           int
	}{
		{"files env and exit code", []string{"--file", "job.py=" + src, "--env", "WHO=berth", "--", "/usr/bin/python3", "job.py"}, "hello berth\n", "oops\n", 5},
		{"timeout", []string{"--timeout", "500ms", "--", "sleep", "30"}, "", "timed out", 124},
		{"not found", []string{"--", "no-such-program"}, "", "command not found", 127},
		{"out of memory", []string{"--memory", "64Mi", "--", "/usr/bin/python3", "-c", "b = bytearray(1 << 30)"}, "", "out of memory", 137},
		{"signal", []string{"--", "sh", "-c", "kill -TERM $$"}, "", "", 128 + 15},
		// Output is printed as it is, as docker exec does; --sanitize
		// keeps it from acting on the terminal.
		{"raw output", []string{"--", "printf", `a\033]0;t\007b\r\n`}, "a\x1b]0;t\x07b\r\n", "", 0},
		{"sanitize", []string{"--sanitize", "--", "printf", `a\033]0;t\007b\r\n\033[31mc\r`}, "ab\nc\n", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := run(tt.args...)
			if code != tt.code || stdout != tt.stdout || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("berth run %v: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q",
					tt.args, code, stdout, stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	t.Run("live output", func(t *testing.T) {
		// The command prints its second line only once the test has
		// seen its first: berth run that printed nothing before the
		// command's end would never see it.
		ctx, cancel := context.WithTimeout(t.Context(), commandTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, berth, "run", "--address", addr, "--", "sh", "-c", "echo first; "+waitGo+"; echo second")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(stdout)
		wantLiveFirstLine(t, r)
		touchRunningSandboxes(t, data, "go")
		rest, _ := io.ReadAll(r)
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
		if string(rest) != "second\n" {
			t.Fatalf("after the first line, got %q, want second", rest)
		}
	})
	t.Run("detach then logs", func(t *testing.T) {
		id, _, code := run("--detach", "--", "sh", "-c", "echo early; sleep 1; echo late >&2; exit 9")
		id = strings.TrimSpace(id)
		if code != 0 || !strings.HasPrefix(id, "run-") {
			t.Fatalf("detach: exit %d, id %q", code, id)
		}
		o, e, code := runBerth(t, berth, "logs", "--address", addr, id)
		if code != 9 || o != "early\n" || e != "late\n" {
			t.Errorf("logs: exit %d, stdout %q, stderr %q; want exit 9, early, late", code, o, e)
		}
	})
	t.Run("large output", func(t *testing.T) {
		stdout, _, code := run("--", "sh", "-c", "seq 1 300000")
		if code != 0 || strings.Count(stdout, "\n") != 300000 || !strings.HasSuffix(stdout, "\n300000\n") {
			t.Errorf("exit %d, %d lines", code, strings.Count(stdout, "\n"))
		}
	})
	t.Run("no model named", func(t *testing.T) {
		testkit.Eventually(t, "berth dev to say BERTH_MODEL is not set", 30*time.Second, func() bool {
			return strings.Contains(devLog.String(), "BERTH_MODEL is not set")
		})
		out := runOK(t, berth, "providers", "--address", addr)
		if line := logLine(out, "model"); !strings.HasPrefix(line, "model: none: ") {
			t.Errorf("berth providers:\n%s\nwant a line model: none: ...", out)
		}
	})
	t.Run("server unreachable", func(t *testing.T) {
		_, stderr, code := runBerth(t, berth, "run", "--address", fmt.Sprintf("127.0.0.1:%d", testkit.FreePort(t)), "--", "true")
		if code == 0 || !strings.Contains(stderr, "cannot reach the Temporal server") {
			t.Errorf("got exit %d, %q", code, stderr)
		}
	})
}

// TestDevKilledMidCommand kills berth dev (server and worker) with
// SIGKILL while a command runs, and starts it again on the same data
// directory: the run goes on, the retried activity attaches to the
// command still running in the sandbox, and the command runs once.
func TestDevKilledMidCommand(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	id, _, _ := runBerth(t, berth, "run", "--address", addr, "--detach", "--",
		"sh", "-c", "echo ran >> log; sleep 6; cat log; exit 4")
	id = strings.TrimSpace(id)
	waitSandboxFile(t, data, "log") // the command is running
	if err := dev.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Wait belongs to startDev: a process is gone once it is reaped.
	testkit.Eventually(t, "the killed berth dev to be reaped", 15*time.Second, func() bool {
		return syscall.Kill(dev.Process.Pid, 0) != nil
	})

	var again testkit.SyncBuffer
	dev, _ = startDev(t, berth, data, port, &again)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("berth dev, before the kill:\n%s", devLog.String())
		}
		stopDev(t, dev, &again)
	})
	stdout, stderr, code := runBerth(t, berth, "logs", "--address", addr, id)
	if code != 4 || stdout != "ran\n" {
		t.Errorf("after the restart: exit %d, stdout %q, stderr %q; want exit 4 and one run", code, stdout, stderr)
	}
}

// touchRunningSandboxes creates an empty file at path in the workspace
// of every running sandbox of data: those of earlier runs may not be
// destroyed yet.
func touchRunningSandboxes(t *testing.T, data, path string) {
	t.Helper()
	touched := 0
	for _, dir := range sandboxDirs(t, data) {
		if ws := sandboxWorkspace(data, dir); ws != "" && os.WriteFile(filepath.Join(ws, path), nil, 0o644) == nil {
			touched++
		}
	}
	if touched == 0 {
		t.Fatalf("no running sandbox in %s to create %s in", data, path)
	}
}

// destroyLeftovers destroys the sandboxes a failed test left in a data
// directory: sandboxes outlive berth dev by design, and would outlive the
// test.
func destroyLeftovers(t testing.TB, data string) {
	state := filepath.Join(data, "linux")
	if _, err := os.Stat(state); err != nil {
		return
	}
	p, err := linux.New(linux.Config{StateDir: state, Pool: -1})
	if err != nil {
		t.Logf("clean up %s: %v", state, err)
		return
	}
	defer p.Close()
	infos, _ := p.List(context.Background(), nil)
	for _, info := range infos {
		if sb, err := p.Get(context.Background(), info.ID); err == nil {
			sb.Destroy(context.Background())
		}
	}
}

// wantLiveFirstLine reads the line "first" from r while the command that
// prints it still runs (it prints more only once the test has read it):
// output that is not live never comes, and the test fails after a minute.
func wantLiveFirstLine(t *testing.T, r *bufio.Reader) {
	t.Helper()
	firstc := make(chan string, 1)
	go func() { first, _ := r.ReadString('\n'); firstc <- first }()
	select {
	case first := <-firstc:
		if first != "first\n" {
			t.Fatalf("the first line printed is %q, want first", first)
		}
	case <-time.After(time.Minute):
		t.Fatal("the first line was not printed within a minute while the command ran: not live")
	}
}
