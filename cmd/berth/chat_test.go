package main

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/session"
)

// terminal is berth chat running in a tmux session of its own, on a tmux
// server of its own, driven by keys and read from the screen.
type terminal struct {
	t      *testing.T
	socket string
}

func startTerminal(t *testing.T, command ...string) *terminal {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("berth chat's test needs tmux (.ci/run installs it)")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	term := &terminal{t: t, socket: "berth-chat-" + hex.EncodeToString(b)}
	term.tmux("new-session", "-d", "-x", "160", "-y", "50", "-s", "chat", strings.Join(command, " "))
	t.Cleanup(func() { exec.Command("tmux", "-L", term.socket, "kill-server").Run() })
	return term
}

func (term *terminal) tmux(args ...string) string {
	term.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", term.socket}, args...)...).CombinedOutput()
	if err != nil {
		term.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the terminal shows, wrapped lines joined.
func (term *terminal) screen() string { return term.tmux("capture-pane", "-p", "-J", "-t", "chat") }

// wait waits until the screen shows each of want.
func (term *terminal) wait(want ...string) string {
	term.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		s := term.screen()
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("the screen never showed %q:\n%s", missing, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// typeLine types text and enter.
func (term *terminal) typeLine(text string) {
	term.t.Helper()
	term.tmux("send-keys", "-t", "chat", "-l", text)
	term.tmux("send-keys", "-t", "chat", "Enter")
}

// keys sends keys by their tmux names (C-c, Enter, n).
func (term *terminal) keys(keys ...string) {
	term.t.Helper()
	term.tmux(append([]string{"send-keys", "-t", "chat"}, keys...)...)
}

// exited waits until berth chat has left the terminal.
func (term *terminal) exited() {
	term.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("tmux", "-L", term.socket, "list-panes", "-t", "chat", "-F", "#{pane_dead} #{pane_current_command}").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "berth") {
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("berth chat did not quit:\n%s", term.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestChatInTmux drives berth chat in a terminal through one scripted
// conversation, as a person would: a new session, a turn with a tool
// call, a title, a fork, a switch to docker on an image it names,
// quitting and coming back to the same place, and /done destroy.
func TestChatInTmux(t *testing.T) {
	t.Parallel()
	// docker's default image is one nobody has: the switch must run on
	// the image it names.
	s := startSessionCLI(t, "--provider-config", "docker.image=berth-no-such-image:0")
	chat := func(args ...string) *terminal {
		return startTerminal(t, append([]string{s.berth, "chat", "--address", s.addr}, args...)...)
	}
	term := chat()
	term.keys("n")
	term.wait("session s1")

	s.model.Script(shellCall("c1", "echo 'print(6*7)' > main.py && python3 main.py"), fakemodel.Reply{Text: "main.py prints 42."})
	term.typeLine("write main.py")
	term.wait("you: write main.py", "$ echo 'print(6*7)' > main.py && python3 main.py", "main.py prints 42.")

	// A command's output shows as it runs.
	s.model.Script(shellCall("c0", "echo tick 1; sleep 4; echo tick 2"), fakemodel.Reply{Text: "Ticked twice."})
	term.typeLine("tick")
	if screen := term.wait("  tick 1"); !strings.Contains(screen, "running…") || strings.Contains(screen, "  tick 2") {
		t.Errorf("the command's first line was not shown while it ran:\n%s", screen)
	}
	term.wait("  tick 2", "Ticked twice.")

	term.typeLine("/title calc")
	term.wait("session s1 · calc")

	term.typeLine("/fork calc-2")
	term.wait("session s2 · calc-2")
	s.model.Script(shellCall("c2", "python3 main.py"), fakemodel.Reply{Text: "The fork has it too."})
	term.typeLine("run it")
	term.wait("The fork has it too.")
	reqs := s.model.Requests()
	if first := reqs[len(reqs)-2]; !carries(first, "write main.py") {
		t.Errorf("the fork's model call lacks the conversation before the fork: %+v", first.Messages)
	}

	term.typeLine("/switch docker " + testImage)
	term.wait("session s2 · calc-2 · docker")
	s.model.Script(shellCall("c3", "cat main.py; cat /etc/os-release | head -1"), fakemodel.Reply{Text: "Moved, file and all."})
	term.typeLine("still there?")
	term.wait("Moved, file and all.", "print(6*7)")

	// Quit, open it again: the same session, where it was.
	term.keys("C-c")
	term.exited()
	term = chat("calc-2")
	term.wait("session s2 · calc-2 · docker", "you: run it", "The fork has it too.", "Moved, file and all.")

	term.typeLine("/done destroy")
	term.wait("berth chat: sessions", "destroyed s2", "s1  calc") // back on the list, where the source remains
	term.keys("q")
	term.exited()
	infos := decode[[]session.Info](t, "ls -o json", s.ok("ls", "-o", "json"))
	if len(infos) != 1 || infos[0].ID != "s1" || infos[0].Title != "calc" {
		t.Errorf("sessions after /done destroy of the fork: %+v", infos)
	}
}
