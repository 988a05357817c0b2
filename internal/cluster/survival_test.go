package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	_ "gocloud.dev/blob/s3blob" // the cluster's store

	"github.com/berth-dev/berth"
	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/session"
	"github.com/berth-dev/berth/workflows"
)

// TestClusterSurvival: a run and two agent sessions driven by a
// scripted model, on the cluster, through the SDK. The Temporal server
// is killed and started again under a session's turn, which its client
// follows to its end, once. Then one host is lost for good while it
// holds a run's command in flight, a session's tool call in flight and
// a session idle between turns: the run fails SandboxLost, its command
// not run again; the tool call in flight is reported to the model as
// lost and not run again, and the same turn goes on on another host
// with the workspace of the session's last checkpoint; the idle
// session's next turn finds the loss, is told what it lost, and runs
// on another host too. Files checkpointed are there; those written
// since are named lost and are gone.
func TestClusterSurvival(t *testing.T) {
	t.Parallel()
	c := up(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	tc, bc := c.dial(ctx, t)
	fm := c.serveModel(ctx, t, tc)
	sessions := bc.Sessions("")

	// Both sessions checkpoint after every second mutating call; each
	// tells the model server whose script answers it by its
	// instructions.
	newSession := func(name string) session.Info {
		t.Helper()
		info, err := sessions.Create(ctx, session.CreateRequest{Title: name, CheckpointEvery: 2,
			SystemPrompt: "You are session " + name + "."})
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	alpha := newSession("alpha")
	lostHost := c.holder(t, sessionSandbox(ctx, t, sessions, alpha).ID)
	// The other hosts get a large sandbox each: placement (least share
	// of memory in use) puts the next ones on alpha's host.
	c.fill(ctx, t, bc, lostHost)
	bravo := newSession("bravo")
	if h := c.holder(t, sessionSandbox(ctx, t, sessions, bravo).ID); h != lostHost {
		t.Fatalf("bravo's sandbox is on %s; want %s, the least loaded", h, lostHost)
	}

	// First turns: two files each, checkpointed after the second.
	fm.ScriptFor("alpha", calls(write("a1", "a.txt", "a\n"), shell("a2", "echo b > b.txt")), text("alpha 1"))
	fm.ScriptFor("bravo", calls(write("b1", "k.txt", "k\n"), shell("b2", "echo l > l.txt")), text("bravo 1"))
	for _, s := range []session.Info{alpha, bravo} {
		turn := sendOK(ctx, t, sessions, s, "make two files")
		if ck := sessionSandbox(ctx, t, sessions, s).Checkpoint; ck == "" {
			t.Fatalf("%s: no checkpoint after turn %d's two calls", s.Title, turn.Number)
		}
	}
	// Bravo writes one more file, never checkpointed, and waits.
	fm.ScriptFor("bravo", calls(write("b3", "m.txt", "m\n")), text("bravo 2"))
	sendOK(ctx, t, sessions, bravo, "one more")
	bravoCheckpoint := sessionSandbox(ctx, t, sessions, bravo).Checkpoint

	// The server is killed under alpha's command and started again:
	// the client following the turn waits, and the turn ends once, its
	// command run once.
	fm.ScriptFor("alpha", calls(shell("a3", "echo once >> once.txt; sleep 8; cat once.txt"), write("a4", "n.txt", "n\n")), text("alpha 2"))
	n, err := sessions.Send(ctx, alpha.ID, "across a restart")
	if err != nil {
		t.Fatal(err)
	}
	alphaBox := bc.Sandboxes().Handle(alpha.WorkflowID)
	testkit.Eventually(t, "alpha's command to run", time.Minute, func() bool {
		_, err := alphaBox.ReadFile(ctx, "once.txt")
		return err == nil
	})
	if err := c.run(t, "kill-server"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := c.run(t, "start-server"); err != nil {
		t.Fatal(err)
	}
	turn, err := sessions.Follow(ctx, alpha.ID, n, nil)
	if err != nil {
		t.Fatalf("following alpha's turn across the server's restart: %v", err)
	}
	t.Logf("server restart: alpha's turn %d ended %v after the kill", n, time.Since(began).Round(time.Millisecond))
	if turn.Status != agent.StatusDone || turn.Answer != "alpha 2" || len(turn.Calls) != 2 {
		t.Fatalf("alpha's turn across the restart: %+v", turn)
	}
	if out := turn.Calls[0].Output; out != "exit code 0\nonce\n" {
		t.Errorf("the command across the restart gave %q; want it run once", out)
	}
	alphaCheckpoint := sessionSandbox(ctx, t, sessions, alpha).Checkpoint
	if alphaCheckpoint == "" {
		t.Fatal("alpha has no checkpoint after its second turn")
	}

	// On the host to be lost: a run's command, alpha's tool call, and
	// bravo, idle.
	run, err := bc.Run(ctx, berth.RunOptions{Argv: []string{"sh", "-c", "echo ran >> ran; sleep 600"}})
	if err != nil {
		t.Fatal(err)
	}
	var rs workflows.RunStatus
	testkit.Eventually(t, "the run's command to start", time.Minute, func() bool {
		v, err := tc.QueryWorkflow(ctx, run.ID(), "", workflows.RunQuery)
		return err == nil && v.Get(&rs) == nil && rs.Stdout != ""
	})
	if h := c.holder(t, rs.Sandbox); h != lostHost {
		t.Fatalf("the run's sandbox is on %s; want %s, the least loaded", h, lostHost)
	}
	fm.ScriptFor("alpha", calls(write("a5", "d.txt", "d\n"), shell("a6", "echo ran >> ran.txt; sleep 600")),
		calls(shell("a7", "ls; cat once.txt")), text("alpha 3"))
	n, err = sessions.Send(ctx, alpha.ID, "the host goes")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "alpha's command to start", time.Minute, func() bool {
		st, err := sessions.State(ctx, alpha.ID)
		if err != nil || len(st.Turn.Calls) < 2 || st.Turn.Number != n {
			return false
		}
		_, err = alphaBox.ReadFile(ctx, "ran.txt")
		return st.Turn.Calls[1].Status == agent.StatusRunning && err == nil
	})

	if err := c.run(t, "kill-host", strings.TrimPrefix(lostHost, "h")); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	bound := heartbeat + hostTimeout + 30*time.Second
	var wg sync.WaitGroup
	wg.Go(func() {
		// The run: lost with its sandbox, not run again.
		res, err := run.Wait(ctx)
		took := time.Since(killed)
		t.Logf("the run failed %v after the kill: %v", took.Round(time.Millisecond), err)
		if berth.KindOf(err) != berth.SandboxLost || !strings.Contains(fmt.Sprint(err), rs.Sandbox+" was lost mid-run") {
			t.Errorf("the run whose host was lost: %v (result %+v); want %s naming sandbox %s", err, res, berth.SandboxLost, rs.Sandbox)
		}
		if took > bound {
			t.Errorf("the run's loss was reported after %v; want within %v", took, bound)
		}
	})
	var alphaTurn, bravoTurn agent.TurnState
	wg.Go(func() {
		var err error
		alphaTurn, err = sessions.Follow(ctx, alpha.ID, n, nil)
		if err != nil {
			t.Errorf("alpha's turn: %v", err)
		}
		t.Logf("alpha's turn %d ended %v after the kill", n, time.Since(killed).Round(time.Millisecond))
	})
	wg.Go(func() {
		// Bravo's next turn: its first call finds the sandbox lost.
		fm.ScriptFor("bravo", calls(shell("b4", "cat k.txt l.txt")), calls(shell("b5", "ls")), text("bravo 3"))
		turn, err := sessions.Send(ctx, bravo.ID, "after the loss")
		if err == nil {
			bravoTurn, err = sessions.Follow(ctx, bravo.ID, turn, nil)
		}
		if err != nil {
			t.Errorf("bravo's turn: %v", err)
		}
		t.Logf("bravo's turn %d ended %v after the kill", turn, time.Since(killed).Round(time.Millisecond))
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Alpha: the call in flight failed as lost, naming the checkpoint
	// and the file written since; the turn went on in a new sandbox on
	// another host, with the checkpoint's files and not the others.
	if alphaTurn.Status != agent.StatusDone || alphaTurn.Answer != "alpha 3" || len(alphaTurn.Calls) != 3 {
		t.Fatalf("alpha's turn across the loss: %+v", alphaTurn)
	}
	toldLost(t, "alpha's call in flight", alphaTurn.Calls[1], "while this call was under way", "not run again", alphaCheckpoint, "write d.txt")
	if got := alphaTurn.Calls[2].Output; got != "exit code 0\na.txt\nb.txt\nn.txt\nonce.txt\nonce\n" {
		t.Errorf("alpha's workspace after the loss: %q; want the checkpoint's files, and once.txt with one line", got)
	}
	bravoState := sessionSandbox(ctx, t, sessions, bravo)
	alphaState := sessionSandbox(ctx, t, sessions, alpha)
	for _, s := range []struct {
		name string
		id   string
	}{{"alpha", alphaState.ID}, {"bravo", bravoState.ID}} {
		if h := c.holder(t, s.id); h == lostHost || h == "" {
			t.Errorf("%s's sandbox %s is on %q after the loss; want another host than %s", s.name, s.id, h, lostHost)
		}
	}
	for path, want := range map[string]string{"a.txt": "a\n", "n.txt": "n\n", "d.txt": "", "ran.txt": ""} {
		c.checkFile(ctx, t, alphaBox, path, want)
	}

	// Bravo: its first call found the loss and was not run; the next
	// ran in the new sandbox, with the checkpoint's files only.
	if bravoTurn.Status != agent.StatusDone || bravoTurn.Answer != "bravo 3" || len(bravoTurn.Calls) != 2 {
		t.Fatalf("bravo's turn after the loss: %+v", bravoTurn)
	}
	toldLost(t, "bravo's first call after the loss", bravoTurn.Calls[0], "before this call reached it", "did not run", bravoCheckpoint, "write m.txt")
	if got := bravoTurn.Calls[1].Output; got != "exit code 0\nk.txt\nl.txt\n" {
		t.Errorf("bravo's workspace after the loss: %q; want the checkpoint's files alone", got)
	}
	c.checkFile(ctx, t, bc.Sandboxes().Handle(bravo.WorkflowID), "m.txt", "")

	// Every model call once: a turn's calls were not asked again.
	for name, want := range map[string]int{"alpha": 7, "bravo": 7} {
		if got := fm.requestsFor(name); got != want {
			t.Errorf("%s made %d model calls; want %d, each once", name, got, want)
		}
	}
}

// toldLost checks that a tool call failed as lost, and that what the
// model was told says each of wants.
func toldLost(t *testing.T, what string, call agent.CallState, wants ...string) {
	t.Helper()
	t.Logf("%s: %s", what, call.Output)
	for _, want := range append([]string{"sandbox lost"}, wants...) {
		if !call.Failed || !strings.Contains(call.Output, want) {
			t.Errorf("%s gave the model %q (failed %v); want it to say %q", what, call.Output, call.Failed, want)
		}
	}
}

// model is the scripted model the sessions call: a fake model server
// on loopback, called by a model worker of the test's own on the
// sessions' model queue, with the cluster's store (the model activity
// reads the conversation there, and writes the streams the relay
// serves). The hosts serve no model.
type scriptedModel struct {
	*fakemodel.Server
}

func (c *cluster) serveModel(ctx context.Context, t *testing.T, tc client.Client) scriptedModel {
	t.Helper()
	bucket := c.bucket(ctx, t)
	fm := fakemodel.New(t)
	m, err := model.New(model.Config{BaseURL: fm.URL, APIKey: fakemodel.Key, Model: fakemodel.Model}, bucket)
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(tc, agent.DefaultModelQueue, worker.Options{})
	m.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return scriptedModel{fm}
}

// requestsFor counts the completion requests of the session whose
// instructions name name.
func (m scriptedModel) requestsFor(name string) int {
	n := 0
	for _, r := range m.Requests() {
		if len(r.Messages) > 0 && strings.Contains(r.Messages[0].Text(), "session "+name+".") {
			n++
		}
	}
	return n
}

// holder names the host (h1, h2, ...) whose linux provider holds
// sandbox id, or "" when none does.
func (c *cluster) holder(t *testing.T, id string) string {
	t.Helper()
	for _, pattern := range []string{"h*/*/" + id, "h*/*/*/" + id} {
		found, err := filepath.Glob(filepath.Join(c.dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		if len(found) > 0 {
			rel, _ := filepath.Rel(c.dir, found[0])
			return strings.Split(rel, string(filepath.Separator))[0]
		}
	}
	return ""
}

// fill gives every host but keep a sandbox with a large memory limit,
// so that placement, by the share of memory in use, sends the next
// sandboxes to keep.
func (c *cluster) fill(ctx context.Context, t *testing.T, bc *berth.Client, keep string) {
	t.Helper()
	for i := 1; i < 3; i++ {
		s, err := bc.Sandboxes().Create(ctx, berth.SandboxOptions{ID: fmt.Sprintf("filler-%d", i),
			Memory: 8 << 30, IdleTimeout: berth.Never, HibernateAfter: berth.Never})
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h := c.holder(t, st.Instance); h == keep {
			t.Fatalf("filler %s is on %s, the host it was to keep free", s.ID(), h)
		}
	}
}

// sessionSandbox is a session's sandbox as its state says.
func sessionSandbox(ctx context.Context, t *testing.T, s *berth.Sessions, info session.Info) struct{ ID, Checkpoint string } {
	t.Helper()
	st, err := s.State(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	return struct{ ID, Checkpoint string }{st.Sandbox.ID, st.Sandbox.Checkpoint}
}

// sendOK sends a message and follows its turn, which must end done.
func sendOK(ctx context.Context, t *testing.T, s *berth.Sessions, info session.Info, msg string) agent.TurnState {
	t.Helper()
	n, err := s.Send(ctx, info.ID, msg)
	if err != nil {
		t.Fatal(err)
	}
	turn, err := s.Follow(ctx, info.ID, n, nil)
	if err != nil {
		t.Fatal(err)
	}
	if turn.Status != agent.StatusDone {
		t.Fatalf("%s: turn %d: %+v", info.Title, n, turn)
	}
	return turn
}

// checkFile checks a file of a session's workspace: want, or absent
// when want is empty.
func (c *cluster) checkFile(ctx context.Context, t *testing.T, box *berth.Sandbox, path, want string) {
	t.Helper()
	b, err := box.ReadFile(ctx, path)
	switch {
	case want == "" && berth.KindOf(err) != errdefs.FileNotFound:
		t.Errorf("%s in %s's workspace: %q, %v; want it gone with the lost host", path, box.ID(), b, err)
	case want != "" && (err != nil || string(b) != want):
		t.Errorf("%s in %s's workspace: %q, %v; want %q", path, box.ID(), b, err, want)
	}
}

func calls(cs ...fakemodel.ToolCall) fakemodel.Reply { return fakemodel.Reply{ToolCalls: cs} }

func text(s string) fakemodel.Reply { return fakemodel.Reply{Text: s} }

func shell(id, command string) fakemodel.ToolCall {
	b, _ := json.Marshal(map[string]any{"command": command})
	return fakemodel.ToolCall{ID: id, Name: tools.Shell, Arguments: string(b)}
}

func write(id, path, content string) fakemodel.ToolCall {
	b, _ := json.Marshal(map[string]any{"path": path, "content": content})
	return fakemodel.ToolCall{ID: id, Name: tools.WriteFile, Arguments: string(b)}
}
