package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
)

// TestServerGoneForGood SIGKILLs berth dev while clients wait on it, and
// never starts it again: every client, whatever it waits in (an exec's
// result, a run's, a large copy, the output it follows, a session's turn
// under way), ends within
// --retry-for and a few seconds, with exit 125 and a line saying what
// may have run.
func TestServerGoneForGood(t *testing.T) {
	t.Parallel()
	model := fakemodel.New(t)
	env := []string{"BERTH_MODEL=" + fakemodel.Model, "OPENAI_BASE_URL=" + model.URL, "OPENAI_API_KEY=" + fakemodel.Key}
	berth, data := berthBinary(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, env, berth, data, 0, &devLog)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	t.Cleanup(func() { destroyLeftovers(t, data) })
	id, errOut, code := runBerth(t, berth, "sandbox", "create", "--address", addr, "--no-idle-timeout")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(id)
	sid, errOut, code := runBerth(t, berth, "session", "new", "--address", addr)
	if code != 0 {
		t.Fatalf("session new: exit %d: %s", code, errOut)
	}
	sid = strings.TrimSpace(sid)
	// The turn's command runs when the server dies: the turn is under way.
	model.Script(shellCall("c1", "echo started; sleep 600"), fakemodel.Reply{Text: "never"})
	// A file large enough that its copy is under way when the server
	// dies (not zeros, which would travel as holes).
	big := filepath.Join(t.TempDir(), "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("berth "), 1<<20)
	for range 170 { // about 1 GiB
		if _, err := f.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	const retryFor = 5 * time.Second
	rf := retryFor.String()
	clients := map[string]*process{
		"exec": startBerth(t, berth, "sandbox", "exec", "--address", addr, "--retry-for", rf, id, "--", "sh", "-c", "echo started; sleep 600"),
		"run":  startBerth(t, berth, "run", "--address", addr, "--retry-for", rf, "--", "sh", "-c", "echo started; sleep 600"),
		"cp":   startBerth(t, berth, "sandbox", "cp", "--address", addr, "--retry-for", rf, big, id+":big"),
		"send": startBerth(t, berth, "session", "send", "--address", addr, "--retry-for", rf, sid, "run it"),
	}
	// What may have run, and how to see it, each client must say.
	seeWith := map[string]string{
		"exec": "may have run (berth sandbox attach " + id + " ",
		"run":  "may have run (berth logs ",
		"cp":   "sandbox " + id + ": upload",
		"send": "session " + sid + " turn 1: the Temporal server has been unavailable too long; the operation may have run (berth session show " + sid + ")",
	}
	testkit.Eventually(t, "the commands to start", time.Minute, func() bool {
		for _, name := range []string{"exec", "run", "send"} {
			if !strings.Contains(clients[name].stdout.String(), "started") {
				return false
			}
		}
		return true
	})
	if err := dev.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Each client's end is timed as it comes, not as it is waited for.
	ended := map[string]chan time.Duration{}
	for name, c := range clients {
		ended[name] = make(chan time.Duration, 1)
		go func() {
			<-c.exited
			ended[name] <- time.Since(killed)
		}()
	}
	for name, c := range clients {
		code := c.wait(t, retryFor+time.Minute)
		t.Logf("%s: exit %d, stderr %q", name, code, c.stderr.String())
		if took := <-ended[name]; took > retryFor+5*time.Second {
			t.Errorf("%s: ended %v after the server died, past --retry-for %v + 5s; stderr %q", name, took.Round(time.Second), retryFor, c.stderr.String())
		}
		if code != exitBerth || !strings.Contains(c.stderr.String(), "unavailable") {
			t.Errorf("%s: exit %d, stderr %q; want %d saying the server is unavailable", name, code, c.stderr.String(), exitBerth)
		}
		if hint := seeWith[name]; !strings.Contains(c.stderr.String(), hint) {
			t.Errorf("%s: stderr %q does not say how to see what may have run (%s)", name, c.stderr.String(), hint)
		}
		// One outage is told once, however many calls wait through it.
		if n := strings.Count(c.stderr.String(), "retrying for up to"); n != 1 {
			t.Errorf("%s: told of the outage %d times, want once; stderr %q", name, n, c.stderr.String())
		}
	}
}
