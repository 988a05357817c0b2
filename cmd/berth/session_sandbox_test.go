package main

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/session"
)

// TestSessionSandbox reaches a coding agent session's sandbox through
// berth sandbox, by the session's id: exec, cp both ways and inspect,
// between turns and during one, waking it from a pause; none of it
// enters the conversation. The operations the session's own commands do
// (pause, snapshot, fork, switch, rm...) are refused in one line naming
// them. One berth dev serves every part.
func TestSessionSandbox(t *testing.T) {
	t.Parallel()
	s := startSessionCLI(t)
	// The helpers take the test that runs them: a subtest fails itself.
	sb := func(t *testing.T, args ...string) (string, string, int) {
		t.Helper()
		// Flags before the arguments: exec's command follows a "--".
		return runBerth(t, s.berth, append([]string{"sandbox", args[0], "--address", s.addr}, args[1:]...)...)
	}
	ok := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, code := sb(t, args...)
		if code != 0 {
			t.Fatalf("berth sandbox %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	sessionOK := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, code := runBerth(t, s.berth, append([]string{"session", args[0], "--address", s.addr}, args[1:]...)...)
		if code != 0 {
			t.Fatalf("berth session %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	state := func(t *testing.T, id string) agent.State {
		t.Helper()
		return decode[agent.State](t, "session show -o json", sessionOK(t, "show", id, "-o", "json"))
	}

	id := strings.TrimSpace(sessionOK(t, "new", "--title", "reach"))
	s.model.Script(shellCall("c1", "printf 'print(6*7)\\n' > hello.py"), fakemodel.Reply{Text: "hello.py is written."})
	sessionOK(t, "send", id, "write hello.py")
	messages := state(t, id).Messages
	// unchanged checks that what the person did entered no conversation.
	unchanged := func(t *testing.T) {
		t.Helper()
		if n := state(t, id).Messages; n != messages {
			t.Errorf("the conversation holds %d messages, was %d", n, messages)
		}
	}

	t.Run("exec and cp out what a turn wrote", func(t *testing.T) {
		if out := ok(t, "exec", id, "--", "/usr/bin/python3", "hello.py"); out != "42\n" {
			t.Errorf("exec in the session's sandbox printed %q", out)
		}
		if _, errOut, code := sb(t, "exec", id, "--", "sh", "-c", "echo oops >&2; exit 3"); code != 3 || errOut != "oops\n" {
			t.Errorf("exec's exit code and stderr: %d, %q", code, errOut)
		}
		tr := tar.NewReader(strings.NewReader(ok(t, "cp", id+":hello.py", "-")))
		hdr, err := tr.Next()
		if err != nil || hdr.Name != "hello.py" {
			t.Fatalf("cp %s:hello.py -: %v, %+v", id, err, hdr)
		}
		if b, _ := io.ReadAll(tr); string(b) != "print(6*7)\n" {
			t.Errorf("cp out of the session's sandbox: %q", b)
		}
		dst := t.TempDir()
		ok(t, "cp", id+":/workspace/hello.py", dst)
		if b, err := os.ReadFile(filepath.Join(dst, "hello.py")); err != nil || string(b) != "print(6*7)\n" {
			t.Errorf("cp out to a directory: %q, %v", b, err)
		}
		in := decode[inspection](t, "inspect -o json", ok(t, "inspect", id, "-o", "json"))
		if in.ID != id || in.Provider != "linux" || in.State != "running" || in.Commands < 2 {
			t.Errorf("inspect %s: %+v", id, in)
		}
		unchanged(t)
	})

	t.Run("cp in, seen by the next turn", func(t *testing.T) {
		local := t.TempDir()
		if err := os.WriteFile(filepath.Join(local, "note.txt"), []byte("from the person\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// A directory goes through an upload to the session's workflow,
		// whose id holds a '/'; a small file inline.
		tree := filepath.Join(local, "tree")
		if err := os.MkdirAll(filepath.Join(tree, "deep"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, "deep", "more.txt"), []byte("and more\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ok(t, "cp", filepath.Join(local, "note.txt"), id+":note.txt")
		ok(t, "cp", tree, id+":")
		unchanged(t)
		s.model.Script(shellCall("c2", "cat note.txt tree/deep/more.txt"), fakemodel.Reply{Text: "I see them."})
		sessionOK(t, "send", id, "read what I put there")
		reqs := s.model.Requests()
		if last := reqs[len(reqs)-1]; !carries(last, "from the person") || !carries(last, "and more") {
			t.Errorf("the turn after cp in did not see the files: %+v", last.Messages)
		}
		messages = state(t, id).Messages
	})

	t.Run("exec during a turn", func(t *testing.T) {
		gate := s.model.Hold()
		s.model.Script(fakemodel.Reply{Text: "done thinking"})
		sessionOK(t, "send", id, "think a while", "--no-wait")
		<-gate.Arrived()
		if out := ok(t, "exec", id, "--", "sh", "-c", "echo person-only > mine.txt; cat hello.py"); out != "print(6*7)\n" {
			t.Errorf("exec during a turn printed %q", out)
		}
		if st := state(t, id); st.Status != agent.StatusThinking {
			t.Errorf("the turn is %s while the person's command ran, want %s", st.Status, agent.StatusThinking)
		}
		gate.Release()
		waitFor(t, func() bool { return state(t, id).Status == agent.StatusIdle })
		messages += 2 // the turn's message and its answer
		unchanged(t)
		for _, req := range s.model.Requests() {
			if carries(req, "person-only") {
				t.Errorf("the model was sent the person's command: %+v", req.Messages)
			}
		}
	})

	t.Run("wakes a paused session", func(t *testing.T) {
		sessionOK(t, "pause", id)
		if in := decode[inspection](t, "inspect -o json", ok(t, "inspect", id, "-o", "json")); in.State != "paused" {
			t.Fatalf("after session pause, the sandbox is %s", in.State)
		}
		if out := ok(t, "exec", id, "--", "cat", "mine.txt"); out != "person-only\n" {
			t.Errorf("exec in a paused session printed %q", out)
		}
		if in := decode[inspection](t, "inspect -o json", ok(t, "inspect", id, "-o", "json")); in.State != "running" {
			t.Errorf("after exec, the sandbox is %s", in.State)
		}
		waitFor(t, func() bool {
			infos := decode[[]session.Info](t, "ls -o json", sessionOK(t, "ls", "-o", "json"))
			return len(infos) == 1 && infos[0].Status == session.StatusActive
		})
		unchanged(t)
	})

	t.Run("what the session does is refused", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"pause", id}, "berth session pause " + id},
			{[]string{"resume", id}, "berth session resume " + id},
			{[]string{"hibernate", id}, "berth session pause " + id},
			{[]string{"snapshot", id}, "berth session fork " + id},
			{[]string{"fork", id}, "berth session fork " + id},
			{[]string{"switch", id, "--provider", "linux"}, "berth session switch " + id},
			{[]string{"rm", id}, "berth session rm " + id},
		} {
			out, errOut, code := sb(t, c.args...)
			if code != exitBerth || out != "" || !strings.HasPrefix(errOut, "berth: NotFound: ") ||
				!strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("berth sandbox %s: exit %d, stdout %q, stderr %q; want exit %d and one NotFound line naming %q",
					strings.Join(c.args, " "), code, out, errOut, exitBerth, c.want)
			}
		}
		if _, errOut, code := sb(t, "create", "--name", "s7"); code != 2 || !strings.Contains(errOut, "session id") {
			t.Errorf("create --name s7: exit %d, %q", code, errOut)
		}
		if _, errOut, code := sb(t, "exec", "s999", "--", "true"); code != exitBerth || !strings.Contains(errOut, "NotFound") {
			t.Errorf("exec in a session that does not exist: exit %d, %q", code, errOut)
		}
		// The session is whole after all that.
		s.model.Script(fakemodel.Reply{Text: "still here"})
		if out := sessionOK(t, "send", id, "still there?"); out != "still here\n" {
			t.Errorf("send after the refusals: %q", out)
		}
	})
}
