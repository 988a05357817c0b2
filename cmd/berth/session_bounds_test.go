package main

import (
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
)

// A 1.5 MB answer, too long for history, is printed whole by send and
// show; one past the model's bound fails its turn in one line; the
// session goes on serving: show, send and rm work.
func TestSessionLargeAnswerCLI(t *testing.T) {
	t.Parallel()
	s := startSessionCLI(t)
	id := strings.TrimSpace(s.ok("new", "--title", "large"))
	large := strings.Repeat("123456789 ", 150_000) + "the end"
	s.model.Script(fakemodel.Reply{Text: large, Piece: 64 << 10},
		fakemodel.Reply{Text: strings.Repeat("x", model.DefaultMaxText+1), Piece: 64 << 10},
		fakemodel.Reply{Text: "small"})

	if out := s.ok("send", id, "say a lot"); out != large+"\n" {
		t.Errorf("send printed %d bytes, want the answer's %d and a newline", len(out), len(large))
	}
	if out := s.ok("show", id); !strings.Contains(out, large+"\n") {
		t.Errorf("show printed %d bytes, without the whole answer", len(out))
	}
	out, errOut, code := s.run("send", id, "say too much")
	if code != exitBerth || !strings.Contains(errOut, string(errdefs.AnswerTooLarge)+": model: the answer's text passed") ||
		strings.Count(errOut, "\n") > 1 || len(out) > model.DefaultMaxText+1<<10 {
		t.Errorf("send past the model's bound: exit %d, %d bytes out, stderr %q", code, len(out), errOut)
	}
	if out := s.ok("show", id); !strings.Contains(out, string(errdefs.AnswerTooLarge)) {
		t.Errorf("show after the failed turn does not say why it failed")
	}
	if out := s.ok("send", id, "briefly"); out != "small\n" {
		t.Errorf("send after the failed turn: %q", out)
	}
	s.ok("rm", id)
}
