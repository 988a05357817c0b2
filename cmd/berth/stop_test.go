package main

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
)

// loopScript counts, ten times a second, into the file loop: the count
// and the time, in seconds.
const loopScript = `(i=0; while :; do i=$((i+1)); echo "$i $(date +%s)" >> loop; sleep 0.1; done) >/dev/null 2>&1 </dev/null &`

// loopSteps reads a sandbox's loop file: the time of each step, and
// whether the count went up by one each step (nothing lost).
func loopSteps(t *testing.T, out string) (steps []time.Time, whole bool) {
	t.Helper()
	whole = true
	for i, line := range lines(out) {
		n, at, ok := strings.Cut(line, " ")
		count, err1 := strconv.Atoi(n)
		sec, err2 := strconv.ParseInt(at, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("loop line %d: %q", i+1, line)
		}
		if count != i+1 {
			whole = false
		}
		steps = append(steps, time.Unix(sec, 0))
	}
	return steps, whole
}

// TestServiceStopped runs a busy background loop in a sandbox of each
// self-hosted provider and stops berth dev with SIGTERM: it exits 0
// having paused them, and the loops make no progress while it is down;
// started again, sandbox exec answers and the loops go on. Then berth
// dev is killed with SIGKILL and started again: exec answers, the loops
// go on, and no step of theirs is lost.
func TestServiceStopped(t *testing.T) {
	t.Parallel()
	berth, data := build(t), dataDir(t)
	providers := [][]string{{"--provider", "linux"}}
	if out, err := exec.Command("docker", "image", "inspect", testImage).CombinedOutput(); err != nil {
		t.Fatalf("needs the Docker engine and the image %s (.ci/run builds it): %v %s", testImage, err, out)
	}
	providers = append(providers, []string{"--provider", "docker", "--image", testImage})
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Fatalf("needs runsc (.ci/run installs it): %v", err)
	}
	providers = append(providers, []string{"--provider", "gvisor"})

	var devLog testkit.SyncBuffer
	dev, port := startDev(t, berth, data, 0, &devLog, "--stop-timeout", "2s")
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logs := []*testkit.SyncBuffer{&devLog}
	t.Cleanup(func() {
		stopDev(t, dev, logs[len(logs)-1])
		if t.Failed() {
			for i, l := range logs[:len(logs)-1] {
				t.Logf("berth dev, life %d:\n%s", i, l.String())
			}
		}
	})
	ok := func(args ...string) string {
		t.Helper()
		out, errOut, code := runBerth(t, berth, append([]string{"--address", addr}, args...)...)
		if code != 0 {
			t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	var ids []string
	for _, p := range providers {
		id := strings.TrimSpace(ok(append([]string{"sandbox", "create", "--no-idle-timeout"}, p...)...))
		t.Cleanup(func() { exec.Command(berth, "--address", addr, "sandbox", "rm", id).Run() })
		ok("sandbox", "exec", id, "--", "sh", "-c", loopScript)
		ids = append(ids, id)
	}
	restart := func(sig syscall.Signal) (down, up time.Time) {
		t.Helper()
		if err := dev.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, "berth dev to exit", time.Minute, func() bool { return syscall.Kill(dev.Process.Pid, 0) != nil })
		down = time.Now()
		var again testkit.SyncBuffer
		logs = append(logs, &again)
		dev, _ = startDev(t, berth, data, port, &again)
		return down, time.Now()
	}

	t.Run("SIGTERM", func(t *testing.T) {
		down, up := restart(syscall.SIGTERM)
		// The provider's ids, not the sandboxes' (their workflows').
		if stopped := logLine(logs[len(logs)-2].String(), "berth dev stopped"); strings.Count(stopped, "sb-") != len(ids) {
			t.Errorf("berth dev's last words: %q, want the %d sandboxes paused", stopped, len(ids))
		}
		for i, id := range ids {
			steps, _ := loopSteps(t, ok("sandbox", "exec", id, "--", "sh", "-c", "sleep 1.5; cat loop"))
			for _, at := range steps {
				// Seconds, as date +%s gives them: the step at down's
				// second, or the next, may be the last before the pause.
				if at.After(down.Add(time.Second)) && at.Before(up.Truncate(time.Second)) {
					t.Errorf("%s: the loop of the %s sandbox ran at %v, while berth dev was down (%v to %v)", id, providers[i][1], at, down, up)
					break
				}
			}
			if len(steps) == 0 || !steps[len(steps)-1].After(up) {
				t.Errorf("%s: the loop of the %s sandbox did not go on after the restart", id, providers[i][1])
			}
		}
	})
	t.Run("SIGKILL", func(t *testing.T) {
		_, up := restart(syscall.SIGKILL)
		for i, id := range ids {
			steps, whole := loopSteps(t, ok("sandbox", "exec", id, "--", "sh", "-c", "sleep 1.5; cat loop"))
			if len(steps) == 0 || !steps[len(steps)-1].After(up) {
				t.Errorf("%s: the loop of the %s sandbox did not go on after the restart", id, providers[i][1])
			}
			if !whole {
				t.Errorf("%s: the loop of the %s sandbox lost steps", id, providers[i][1])
			}
		}
	})
}

// TestSandboxLsNoWorker: berth sandbox ls marks a sandbox whose host's
// queue no worker polls, here after its worker and the server went down
// and the server alone came back; once its worker is back, the mark
// goes.
func TestSandboxLsNoWorker(t *testing.T) {
	t.Parallel()
	berth, data := berthBinary(t), dataDir(t)
	srv := startServer(t, data, "127.0.0.1:0")
	addr := srv.Address()
	w := startWorker(t, berth, addr, data, "worker")
	id, errOut, code := runBerth(t, berth, "sandbox", "create", "--address", addr, "--no-idle-timeout")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(id)
	type row struct {
		ID       string  `json:"id"`
		NoWorker bool    `json:"no_worker"`
		Seconds  float64 `json:"no_worker_seconds"`
	}
	ls := func() (string, row) {
		t.Helper()
		text := runOK(t, berth, "sandbox", "ls", "--address", addr)
		rows := decode[[]row](t, "ls", runOK(t, berth, "sandbox", "ls", "--address", addr, "-o", "json"))
		if len(rows) != 1 || rows[0].ID != id {
			t.Fatalf("sandbox ls: %+v, want %s", rows, id)
		}
		return text, rows[0]
	}
	if text, r := ls(); r.NoWorker || strings.Contains(text, "no worker") {
		t.Errorf("with its worker up: %q, %+v; want no mark", text, r)
	}

	w.kill(t)
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	startServer(t, data, addr)
	if text, r := ls(); !r.NoWorker || !strings.Contains(logLine(text, id), "running (no worker)") {
		t.Errorf("with its worker gone: %q, %+v; want it marked", text, r)
	}
	startWorker(t, berth, addr, data, "worker again")
	if text, r := ls(); r.NoWorker || strings.Contains(text, "no worker") {
		t.Errorf("with its worker back: %q, %+v; want no mark", text, r)
	}
	runOK(t, berth, "sandbox", "rm", "--address", addr, id)
}

// TestSessionServiceStopped: a coding agent's session whose sandbox runs
// a busy loop; its worker is stopped with SIGTERM (exit 0), and a new
// one started: berth session send answers, and the loop goes on, having
// made no progress while no worker was up.
func TestSessionServiceStopped(t *testing.T) {
	model := fakemodel.New(t)
	t.Setenv("BERTH_MODEL", fakemodel.Model)
	t.Setenv("OPENAI_BASE_URL", model.URL)
	t.Setenv("OPENAI_API_KEY", fakemodel.Key)
	berth, data := berthBinary(t), dataDir(t)
	srv := startServer(t, data, "127.0.0.1:0")
	addr := srv.Address()
	w := startWorker(t, berth, addr, data, "worker")
	s := &sessionCLI{t: t, berth: berth, addr: addr, model: model, data: data}
	id := strings.TrimSpace(s.ok("new"))
	model.Script(shellCall("c1", loopScript), fakemodel.Reply{Text: "started"})
	s.ok("send", id, "start the loop")

	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.exited:
	case <-time.After(time.Minute):
		t.Fatal("berth worker did not stop on SIGTERM")
	}
	down := time.Now()
	if code := w.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("berth worker exited %d on SIGTERM, want 0", code)
	}
	testkit.Eventually(t, "a few seconds without a worker", time.Minute, func() bool { return time.Since(down) > 3*time.Second })
	up := time.Now()
	startWorker(t, berth, addr, data, "worker again")

	model.Script(shellCall("c2", "sleep 1.5; cat loop"), fakemodel.Reply{Text: "read"})
	out := s.ok("send", id, "how far is it?")
	var loop []string
	for _, line := range lines(out) {
		if f := strings.Fields(line); len(f) == 2 && f[0] != "$" {
			loop = append(loop, f[0]+" "+f[1])
		}
	}
	steps, _ := loopSteps(t, strings.Join(loop, "\n"))
	for _, at := range steps {
		if at.After(down.Add(time.Second)) && at.Before(up.Truncate(time.Second)) {
			t.Errorf("the loop ran at %v, while no worker was up (%v to %v)", at, down, up)
			break
		}
	}
	if len(steps) == 0 || !steps[len(steps)-1].After(up) {
		t.Errorf("the loop did not go on after the restart:\n%s", out)
	}
}
