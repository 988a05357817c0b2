package runkey

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// mainEnv makes the test binary run Main, as berth-sandboxd does, so that
// the supervisor it re-executes is this binary too.
const mainEnv = "BERTH_RUNKEY_TEST_MAIN"

// gateEnv makes it wait for the end of its stdin first, so that callers
// sharing one pipe start together.
const gateEnv = "BERTH_RUNKEY_TEST_GATE"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "run" {
		if os.Getenv(gateEnv) == "1" {
			io.Copy(io.Discard, os.Stdin)
		}
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// command returns `berth-sandboxd run` with args, as a process.
func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], append([]string{"run"}, args...)...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	return cmd
}

type result struct {
	stdout, stderr string
	code           int
}

func call(t *testing.T, args ...string) result {
	t.Helper()
	cmd := command(t, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run %q: %v", args, err)
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

// runs returns how many times the counter file says a command ran.
func runs(t *testing.T, counter string) int {
	t.Helper()
	b, err := os.ReadFile(counter)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// release lets a command blocked reading the fifo go on.
func release(t *testing.T, fifo string) {
	t.Helper()
	if err := os.WriteFile(fifo, []byte("go\n"), 0); err != nil {
		t.Fatal(err)
	}
}

// readUntil reads r until a line equal to want, failing at its end.
func readUntil(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		if strings.TrimSuffix(line, "\n") == want {
			return
		}
		if err != nil {
			t.Fatalf("output ended (%v) before %q", err, want)
		}
	}
}

func TestRetryRunsOnce(t *testing.T) {
	dir, counter := t.TempDir(), filepath.Join(t.TempDir(), "counter")
	args := []string{"--dir", dir, "--key", "exec-1", "--", "sh", "-c",
		`echo x >> "$0"; echo out; echo err >&2; exit 7`, counter}
	first := call(t, args...)
	retry := call(t, args...)
	if want := (result{"out\n", "err\n", 7}); first != want {
		t.Errorf("first call: %+v, want %+v", first, want)
	}
	if retry != first {
		t.Errorf("retry: %+v, want the first call's %+v", retry, first)
	}
	if n := runs(t, counter); n != 1 {
		t.Errorf("the command ran %d times, want 1", n)
	}
}

func TestKeyOfAnotherCommand(t *testing.T) {
	dir, counter := t.TempDir(), filepath.Join(t.TempDir(), "counter")
	if got := call(t, "--dir", dir, "--key", "exec-1", "--", "sh", "-c", `echo x >> "$0"`, counter); got.code != 0 {
		t.Fatalf("first call: %+v", got)
	}
	got := call(t, "--dir", dir, "--key", "exec-1", "--", "sh", "-c", `echo y >> "$0"`, counter)
	if got.code != ExitBerth || !strings.Contains(got.stderr, "another command") {
		t.Errorf("another command under the key: %+v, want exit %d, refused", got, ExitBerth)
	}
	if n := runs(t, counter); n != 1 {
		t.Errorf("commands ran %d times, want 1", n)
	}
}

func TestRetryAfterCallerKilled(t *testing.T) {
	dir, counter, gate := t.TempDir(), filepath.Join(t.TempDir(), "counter"), fifo(t)
	args := []string{"--dir", dir, "--key", "exec-1", "--", "sh", "-c",
		`echo x >> "$0"; echo one; echo e1 >&2; read l < "$1"; echo two; echo e2 >&2; exit 3`, counter, gate}
	first := command(t, args...)
	first.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pipe, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	readUntil(t, bufio.NewReader(pipe), "one")
	// As a remote exec API does on a dropped connection: the caller and
	// its process group.
	syscall.Kill(-first.Process.Pid, syscall.SIGKILL)
	first.Wait()

	done := make(chan result)
	go func() { done <- call(t, args...) }()
	release(t, gate)
	if got, want := <-done, (result{"one\ntwo\n", "e1\ne2\n", 3}); got != want {
		t.Errorf("retry: %+v, want %+v", got, want)
	}
	if n := runs(t, counter); n != 1 {
		t.Errorf("the command ran %d times, want 1", n)
	}
}

func TestRacingFirstCalls(t *testing.T) {
	const rounds, callers = 4, 8
	dir := t.TempDir()
	for round := range rounds {
		counter := filepath.Join(t.TempDir(), "counter")
		args := []string{"--dir", dir, "--key", "exec-" + strconv.Itoa(round), "--", "sh", "-c",
			`echo x >> "$0"; echo out; exit 5`, counter}
		gate, open, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmds := make([]*exec.Cmd, callers)
		outs := make([]bytes.Buffer, callers)
		for i := range cmds {
			cmds[i] = command(t, args...)
			cmds[i].Env = append(cmds[i].Env, gateEnv+"=1")
			cmds[i].Stdin, cmds[i].Stdout = gate, &outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		gate.Close()
		open.Close() // all callers go at once, racing to the entry
		for i, c := range cmds {
			c.Wait()
			if got := outs[i].String(); got != "out\n" || c.ProcessState.ExitCode() != 5 {
				t.Errorf("round %d, caller %d: %q, exit %d; want %q, 5", round, i, got, c.ProcessState.ExitCode(), "out\n")
			}
		}
		if n := runs(t, counter); n != 1 {
			t.Errorf("round %d: the command ran %d times, want 1", round, n)
		}
	}
}

func TestBadKeys(t *testing.T) {
	for name, key := range map[string]string{
		"empty":     "",
		"slash":     "a/b",
		"dotdot":    "..",
		"inner":     "a..b",
		"hidden":    ".new-x",
		"long":      strings.Repeat("k", MaxKeyLen+1),
		"space":     "a b",
		"non-ascii": "é",
	} {
		t.Run(name, func(t *testing.T) {
			dir, counter := t.TempDir(), filepath.Join(t.TempDir(), "counter")
			got := call(t, "--dir", dir, "--key", key, "--", "sh", "-c", `echo x >> "$0"`, counter)
			if got.code != ExitBerth || strings.Count(got.stderr, "\n") != 1 || !strings.Contains(got.stderr, "--key") {
				t.Errorf("got %+v, want exit %d and one line about --key", got, ExitBerth)
			}
			if n := runs(t, counter); n != 0 {
				t.Errorf("the command ran %d times, want none", n)
			}
			if des, _ := os.ReadDir(dir); len(des) != 0 {
				t.Errorf("the journal holds %d entries, want none", len(des))
			}
		})
	}
	if err := ValidKey("wf-1_run.2:activity@3"); err != nil {
		t.Errorf("a good key refused: %v", err)
	}
}

func TestOutputOverCap(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--dir", dir, "--key", "big", "--cap", "1000", "--", "sh", "-c",
		`head -c 5000 /dev/zero | tr '\0' a; echo small >&2; exit 4`}
	for _, which := range []string{"first", "retry"} {
		got := call(t, args...)
		if got.stdout != strings.Repeat("a", 1000) {
			t.Errorf("%s: stdout of %d bytes, want the first 1000", which, len(got.stdout))
		}
		if !strings.HasPrefix(got.stderr, "small\n") || !strings.Contains(got.stderr, "4000 bytes of stdout dropped") {
			t.Errorf("%s: stderr %q, want the command's and the 4000 bytes dropped", which, got.stderr)
		}
		if got.code != 4 {
			t.Errorf("%s: exit %d, want 4", which, got.code)
		}
	}
}

func TestCommandNotFound(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--dir", dir, "--key", "missing", "--", "berth-no-such-command"}
	for _, which := range []string{"first", "retry"} {
		got := call(t, args...)
		if got.code != 127 || got.stdout != "" || !strings.Contains(got.stderr, `cannot start "berth-no-such-command"`) {
			t.Errorf("%s: %+v, want exit 127 and why it could not start", which, got)
		}
	}
}

func TestTimeout(t *testing.T) {
	got := call(t, "--dir", t.TempDir(), "--key", "slow", "--timeout", "50ms", "--", "sh", "-c", "echo started; exec sleep 60")
	if got.code != 128+int(syscall.SIGKILL) || got.stdout != "started\n" || !strings.Contains(got.stderr, "--timeout") {
		t.Errorf("got %+v, want exit %d with its output and a line on the timeout", got, 128+int(syscall.SIGKILL))
	}
}

func TestRetryAfterSupervisorDied(t *testing.T) {
	dir, counter, gate := t.TempDir(), filepath.Join(t.TempDir(), "counter"), fifo(t)
	pidfile := filepath.Join(t.TempDir(), "pid")
	args := []string{"--dir", dir, "--key", "exec-1", "--", "sh", "-c",
		`echo x >> "$0"; echo $$ > "$2"; echo one; read l < "$1"; echo two`, counter, gate, pidfile}
	first := command(t, args...)
	pipe, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var firstErr bytes.Buffer
	first.Stderr = &firstErr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	readUntil(t, bufio.NewReader(pipe), "one")
	// The sandbox restarting: the supervisor and its command die, the
	// journal on disk stays.
	for _, f := range []string{filepath.Join(dir, "exec-1", fileStarted), pidfile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		syscall.Kill(pid, syscall.SIGKILL)
	}
	first.Wait()
	if code := first.ProcessState.ExitCode(); code != ExitBerth || !strings.Contains(firstErr.String(), "supervisor died") {
		t.Errorf("the attached first call: exit %d, %q; want %d and that its supervisor died", code, firstErr.String(), ExitBerth)
	}
	got := call(t, args...)
	if got.code != ExitBerth || strings.Count(got.stderr, "\n") != 1 || !strings.Contains(got.stderr, "supervisor died") {
		t.Errorf("retry: %+v, want exit %d and one line saying the supervisor died", got, ExitBerth)
	}
	if n := runs(t, counter); n != 1 {
		t.Errorf("the command ran %d times, want 1", n)
	}
}

func TestRetryAfterFirstCallDiedBeforeStarting(t *testing.T) {
	dir, counter := t.TempDir(), filepath.Join(t.TempDir(), "counter")
	argv := []string{"sh", "-c", `echo x >> "$0"`, counter}
	// What a first call killed between placing its entry and starting its
	// supervisor leaves.
	tmp, err := os.MkdirTemp(dir, prefixNew)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := build(tmp, argv)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "exec-1")); err != nil {
		t.Fatal(err)
	}
	lock.Close()
	got := call(t, append([]string{"--dir", dir, "--key", "exec-1", "--"}, argv...)...)
	if got.code != ExitBerth || !strings.Contains(got.stderr, "never ran") {
		t.Errorf("retry: %+v, want exit %d and that the command never ran", got, ExitBerth)
	}
	if n := runs(t, counter); n != 0 {
		t.Errorf("the command ran %d times, want none", n)
	}
}
