package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/sandbox"
	"github.com/berth-dev/berth/session"
)

// sessionCLI runs berth dev with the fake model as its model, and gives
// a way to run berth session commands against it.
type sessionCLI struct {
	t     *testing.T
	berth string
	addr  string
	model *fakemodel.Server
	data  string
}

func startSessionCLI(t *testing.T, devFlags ...string) *sessionCLI {
	model := fakemodel.New(t)
	// berth dev takes its model from the environment, as a user's would.
	env := []string{"BERTH_MODEL=" + fakemodel.Model, "OPENAI_BASE_URL=" + model.URL, "OPENAI_API_KEY=" + fakemodel.Key}
	berth, data := build(t), dataDir(t)
	var devLog testkit.SyncBuffer
	dev, port := startDevEnv(t, env, berth, data, 0, &devLog, devFlags...)
	t.Cleanup(func() { stopDev(t, dev, &devLog) })
	dumpOnFailure(t, "berth dev", &devLog)
	return &sessionCLI{t: t, berth: berth, addr: fmt.Sprintf("127.0.0.1:%d", port), model: model, data: data}
}

// run runs berth session args[0] with the rest of args.
func (s *sessionCLI) run(args ...string) (stdout, stderr string, code int) {
	s.t.Helper()
	return runBerth(s.t, s.berth, append([]string{"session", args[0], "--address", s.addr}, args[1:]...)...)
}

// ok runs a command that must succeed and returns its output.
func (s *sessionCLI) ok(args ...string) string {
	s.t.Helper()
	out, errOut, code := s.run(args...)
	if code != 0 {
		s.t.Fatalf("berth session %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// carries says whether a model request's messages hold text.
func carries(req fakemodel.Request, text string) bool {
	b, err := json.Marshal(req.Messages)
	return err == nil && strings.Contains(string(b), text)
}

// runOK runs berth, which must succeed, and returns its output.
func runOK(t *testing.T, berth string, args ...string) string {
	t.Helper()
	out, errOut, code := runBerth(t, berth, args...)
	if code != 0 {
		t.Fatalf("berth %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// shellCall is the model asking for a shell command.
func shellCall(id, command string) fakemodel.Reply {
	args, _ := json.Marshal(map[string]string{"command": command})
	return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{ID: id, Name: "shell", Arguments: string(args)}}}
}

// TestSessionCLI drives the coding agent through berth session as a
// script would: new, send (text and jsonl), show, ls, rename, fork,
// approvals, rm; and the bad inputs, each one line, exit 125 or 2.
func TestSessionCLI(t *testing.T) {
	t.Parallel()
	s := startSessionCLI(t)

	id := strings.TrimSpace(s.ok("new", "--title", "demo"))
	if !session.IsID(id) {
		t.Fatalf("new printed %q, not a session id", id)
	}

	// send prints each tool call, its output, then the answer.
	s.model.Script(shellCall("c1", "echo 'print(6*7)' > main.py && python3 main.py"), fakemodel.Reply{Text: "main.py prints 42."})
	out := s.ok("send", id, "write", "main.py")
	if !strings.Contains(out, "$ echo 'print(6*7)' > main.py && python3 main.py") || !strings.Contains(out, "42") ||
		!strings.HasSuffix(out, "main.py prints 42.\n") {
		t.Errorf("send printed:\n%s\nwant the call, its output (42) and the answer", out)
	}
	reqs := s.model.Requests()
	if last := reqs[len(reqs)-1]; !carries(last, "write main.py") {
		t.Errorf("the model was not sent the message: %+v", last.Messages)
	}

	// -o jsonl: one event a line, in order.
	s.model.Script(shellCall("c2", "cat main.py"), fakemodel.Reply{Text: "It prints 6*7."})
	var (
		types    []string
		streamed string
	)
	for _, line := range lines(s.ok("send", id, "what does main.py do?", "-o", "jsonl")) {
		e := decode[turnEvent](t, "send -o jsonl", line)
		if e.Type == "text" {
			streamed += e.Data // the answer as it streams, when the printer saw it under way
			continue
		}
		types = append(types, e.Type)
		if e.Type == "output" && !strings.Contains(e.Output, "print(6*7)") {
			t.Errorf("output event %+v lacks the file", e)
		}
		if e.Type == "answer" && e.Text != "It prints 6*7." {
			t.Errorf("answer event %+v", e)
		}
	}
	if got := strings.Join(types, ","); got != "turn,call,output,answer" {
		t.Errorf("jsonl events %s, want turn,call,output,answer", got)
	}
	if streamed != "" && streamed != "It prints 6*7." {
		t.Errorf("the answer streamed as %q", streamed)
	}

	// Shell completion offers the sessions.
	if out := runOK(t, s.berth, "__complete", "session", "send", "--address", s.addr, ""); !strings.HasPrefix(out, id+"\tdemo\n") {
		t.Errorf("completion of a session: %q", out)
	}

	// show: the turns so far.
	if out := s.ok("show", id); !strings.Contains(out, "> write main.py") || !strings.Contains(out, "It prints 6*7.") {
		t.Errorf("show:\n%s", out)
	}

	// rename, then address it by its title.
	s.ok("rename", id, "calc")
	infos := decode[[]session.Info](t, "ls -o json", s.ok("ls", "-o", "json"))
	if len(infos) != 1 || infos[0].ID != id || infos[0].Title != "calc" || infos[0].Status != session.StatusActive {
		t.Fatalf("ls after rename: %+v", infos)
	}

	// fork: the conversation and the workspace both go with it.
	fork := strings.TrimSpace(s.ok("fork", "calc", "--title", "calc-2"))
	if fork == id || !session.IsID(fork) {
		t.Fatalf("fork printed %q", fork)
	}
	s.model.Script(shellCall("c3", "python3 main.py"), fakemodel.Reply{Text: "Still 42."})
	if out := s.ok("send", fork, "run it again"); !strings.Contains(out, "42") {
		t.Errorf("send to the fork:\n%s", out)
	}
	reqs = s.model.Requests()
	if first := reqs[len(reqs)-2]; !carries(first, "write main.py") {
		t.Errorf("the fork's model call lacks the source's conversation: %+v", first.Messages)
	}

	// Approvals: the command waits for approve, or deny.
	appr := strings.TrimSpace(s.ok("new", "--approvals"))
	s.model.Script(shellCall("c4", "touch approved"), shellCall("c5", "touch denied"), fakemodel.Reply{Text: "ok"})
	s.ok("send", appr, "touch two files", "--no-wait")
	for _, verb := range []string{"approve", "deny"} {
		waitFor(t, func() bool {
			out, _, _ := s.run("show", appr, "-o", "json")
			return strings.Contains(out, `"awaiting_approval"`)
		})
		s.ok(verb, appr)
	}
	waitFor(t, func() bool { return strings.Contains(s.ok("show", appr), "\nok\n") })
	if _, errOut, code := s.run("approve", appr); code != exitBerth || !strings.Contains(errOut, "no tool call awaits approval") {
		t.Errorf("approve with nothing waiting: exit %d, %q", code, errOut)
	}

	// Bad input: one line, and the manager keeps serving.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"send", "s999", "hello"}, exitBerth, "NotFound"},
		{[]string{"send", "no-such-title", "hello"}, exitBerth, "NotFound"},
		{[]string{"send", id, " "}, exitBerth, "BadInput"},
		{[]string{"rename", id, ""}, exitBerth, "BadInput"},
		{[]string{"fork", "s999"}, exitBerth, "NotFound"},
		{[]string{"send", id}, 2, "arg"},
	} {
		out, errOut, code := s.run(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") > 2 || out != "" {
			t.Errorf("berth session %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, out, errOut, c.code, c.want)
		}
	}

	// pause and resume print the id.
	if out := s.ok("pause", id); out != id+"\n" {
		t.Errorf("session pause printed %q, want the id %s", out, id)
	}
	if out := s.ok("resume", id); out != id+"\n" {
		t.Errorf("session resume printed %q, want the id %s", out, id)
	}
	// rm: each id printed; gone from ls; its fork lives on.
	if out := s.ok("rm", id, appr); out != id+"\n"+appr+"\n" {
		t.Errorf("session rm printed %q, want each id", out)
	}
	infos = decode[[]session.Info](t, "ls -o json", s.ok("ls", "-o", "json"))
	if len(infos) != 1 || infos[0].ID != fork {
		t.Fatalf("ls after rm: %+v", infos)
	}
	s.model.Script(fakemodel.Reply{Text: "here"})
	if out := s.ok("send", fork, "still there?"); out != "here\n" {
		t.Errorf("the fork after its source's rm: %q", out)
	}
	if _, errOut, code := s.run("send", id, "hello"); code != exitBerth || !strings.Contains(errOut, "NotFound") {
		t.Errorf("send to a removed session: exit %d, %q", code, errOut)
	}
}

// waitFor waits, for up to a minute, until cond holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDemo runs README's first command, examples/demo.sh, with the fake
// model as the coding agent's: everything it shows must work.
func TestDemo(t *testing.T) {
	t.Parallel()
	model := fakemodel.New(t)
	model.Script(shellCall("c1", "printf 'def fib(n):\\n    return n if n < 2 else fib(n-1) + fib(n-2)\\n' > fib.py && python3 -c 'import fib; print(fib.fib(10))'"),
		fakemodel.Reply{Text: "fib.py is written; fib(10) is 55."})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../../examples/demo.sh")
	cmd.Env = append(os.Environ(), "BERTH_MODEL="+fakemodel.Model, "OPENAI_BASE_URL="+model.URL, "OPENAI_API_KEY="+fakemodel.Key,
		"BERTH_DEV_FLAGS="+strings.Join(devDefaults, " "))
	// demo.sh keeps its data in $TMPDIR/berth-demo.*, which sandbox
	// users must be able to pass through: the test's own temporary
	// directory is closed to them.
	tmp := os.Getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	before, _ := filepath.Glob(filepath.Join(tmp, "berth-demo.*"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo.sh: %v\n%s", err, out)
	}
	for _, want := range []string{"berth run exited with 3", "background process still alive", "coding agent session s1", "\n  55\n", "fib(10) is 55."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo.sh's output lacks %q:\n%s", want, out)
		}
	}
	// It cleans up after itself: its data directory and log are gone.
	leftBehind := func() {
		after, _ := filepath.Glob(filepath.Join(tmp, "berth-demo.*"))
		for _, f := range after {
			if !slices.Contains(before, f) {
				t.Errorf("demo.sh left %s behind", f)
			}
		}
	}
	leftBehind()

	// When berth dev cannot start, demo.sh says why at once, and still
	// cleans up.
	cmd = exec.CommandContext(ctx, "bash", "../../examples/demo.sh")
	cmd.Env = append(os.Environ(), "BERTH_DEV_FLAGS=--provider no-such-provider")
	start := time.Now()
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "berth dev exited") || !strings.Contains(string(out), "no-such-provider") {
		t.Errorf("demo.sh with berth dev failing: %v\n%s", err, out)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("demo.sh took %s to see berth dev fail", d)
	}
	leftBehind()
}

// TestAgentWorkerKilled kills the only worker with SIGKILL in the middle
// of an agent's turn, first while a tool call's command runs, then while
// a model call is under way, and starts another: each turn finishes, and
// each command ran once.
func TestAgentWorkerKilled(t *testing.T) {
	model := fakemodel.New(t)
	t.Setenv("BERTH_MODEL", fakemodel.Model)
	t.Setenv("OPENAI_BASE_URL", model.URL)
	t.Setenv("OPENAI_API_KEY", fakemodel.Key)
	berth, data := berthBinary(t), dataDir(t)
	srv := startServer(t, data, "127.0.0.1:0")
	addr := srv.Address()
	c := dial1(t, addr)
	// The manager, started ahead of the CLI, gives sessions a short model
	// heartbeat, so that a model call cut off is retried in seconds.
	in := session.ManagerInput{Session: agent.SessionInput{ModelHeartbeatTimeout: 3 * time.Second}}
	if _, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: session.DefaultManagerID, TaskQueue: sandbox.DefaultQueue},
		session.WorkflowName, in); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, berth, addr, data, "first worker")
	s := &sessionCLI{t: t, berth: berth, addr: addr, model: model, data: data}
	id := strings.TrimSpace(s.ok("new"))

	// Mid-tool-call.
	model.Script(shellCall("c1", "echo ran >> log; while [ ! -e go ]; do sleep 0.1; done; echo after"), fakemodel.Reply{Text: "finished"})
	s.ok("send", id, "run it", "--no-wait")
	waitSandboxFile(t, data, "log")
	w.kill(t)
	w = startWorker(t, berth, addr, data, "second worker")
	touchSandboxFile(t, data, "go")
	waitFor(t, func() bool { return strings.Contains(s.ok("show", id), "\nfinished\n") })

	// Mid-model-call: the tool call is done, the model called again.
	model.Script(shellCall("c2", "echo ran >> log"), fakemodel.Reply{Text: "cut off"}, fakemodel.Reply{Text: "answered"})
	first, second := model.Hold(), model.Hold()
	s.ok("send", id, "again", "--no-wait")
	<-first.Arrived()
	first.Release()
	<-second.Arrived()
	w.kill(t)
	startWorker(t, berth, addr, data, "third worker")
	waitFor(t, func() bool { return strings.Contains(s.ok("show", id), "\nanswered\n") })

	model.Script(shellCall("c3", "cat log"), fakemodel.Reply{Text: "read"})
	if out := s.ok("send", id, "log?"); !strings.Contains(out, "  ran\n  ran\n") || strings.Count(out, "ran\n") != 2 {
		t.Errorf("the log after two crashes:\n%s\nwant two runs, one a turn", out)
	}
}

// TestSessionSendRidesOutServerRestart stops the Temporal server while
// berth session send follows a turn whose command runs, and starts it
// again on the same database and port: send waits, then prints the
// turn whole and exits 0; the command ran once.
func TestSessionSendRidesOutServerRestart(t *testing.T) {
	model := fakemodel.New(t)
	t.Setenv("BERTH_MODEL", fakemodel.Model)
	t.Setenv("OPENAI_BASE_URL", model.URL)
	t.Setenv("OPENAI_API_KEY", fakemodel.Key)
	berth, data := berthBinary(t), dataDir(t)
	srv := startServer(t, data, "127.0.0.1:0")
	addr := srv.Address()
	startWorker(t, berth, addr, data, "worker")
	s := &sessionCLI{t: t, berth: berth, addr: addr, model: model, data: data}
	id := strings.TrimSpace(s.ok("new"))

	model.Script(shellCall("c1", "echo ran >> log; "+waitGo+"; echo done-waiting; touch end"), fakemodel.Reply{Text: "finished"})
	send := startBerth(t, berth, "session", "send", "--address", addr, id, "run it")
	waitSandboxFile(t, data, "log")
	if err := srv.Stop(); err != nil {
		t.Fatalf("stop the server: %v", err)
	}
	// The command ends while the server is down: its result waits.
	touchSandboxFile(t, data, "go")
	waitSandboxFile(t, data, "end")
	startServer(t, data, addr)

	code := send.wait(t, 3*time.Minute)
	out := send.stdout.String()
	if code != 0 || !strings.Contains(out, "  done-waiting") || !strings.HasSuffix(out, "finished\n") {
		t.Errorf("berth session send across the restart: exit %d, stdout %q, stderr %q", code, out, send.stderr.String())
	}
	model.Script(shellCall("c2", "cat log"), fakemodel.Reply{Text: "read"})
	if out := s.ok("send", id, "log?"); strings.Count(out, "ran\n") != 1 {
		t.Errorf("the command ran %d times, want once:\n%s", strings.Count(out, "ran\n"), out)
	}
}
