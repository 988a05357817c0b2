package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth"
)

// TestInspectMovesAt: inspect says when a sandbox moves before its
// provider's service would end it, and null (an empty line in text)
// where it has no such limit; held time counts on to now.
func TestInspectMovesAt(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	moves := now.Add(50 * time.Minute)
	for _, c := range []struct {
		moves    time.Time
		wantJSON string
	}{{moves, `"moves_at":"2026-12-02T12:50:00Z"`}, {time.Time{}, `"moves_at":null`}} {
		in := inspect("sbx-1", berth.SandboxStatus{State: berth.StateRunning, MovesAt: c.moves,
			Held: time.Minute, HeldSince: now.Add(-time.Minute)}, now)
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), c.wantJSON) || !strings.Contains(string(b), `"held_seconds":120`) {
			t.Errorf("inspect's JSON %s: want %s and 120 s held", b, c.wantJSON)
		}
		var text bytes.Buffer
		if err := in.writeText(&text); err != nil {
			t.Fatal(err)
		}
		line := ""
		for _, l := range strings.Split(text.String(), "\n") {
			if strings.HasPrefix(l, "moves_at:") {
				line = strings.TrimSpace(strings.TrimPrefix(l, "moves_at:"))
			}
		}
		if c.moves.IsZero() != (line == "") {
			t.Errorf("moves_at line %q for a move at %v", line, c.moves)
		}
	}
}

// TestInspectNotYetMade: a sandbox created hibernated and never woken
// has no instance, and inspect says why instead of an empty line.
func TestInspectNotYetMade(t *testing.T) {
	in := inspect("sbx-1", berth.SandboxStatus{State: berth.StateHibernated, NotYetMade: true, Checkpoint: "tmpl-s1"}, time.Now())
	var text bytes.Buffer
	if err := in.writeText(&text); err != nil {
		t.Fatal(err)
	}
	want := "sandbox: none yet: started hibernated, its first operation makes it from snapshot tmpl-s1\n"
	if !strings.Contains(text.String(), want) {
		t.Errorf("inspect's text:\n%s\nwant the line %q", text.String(), want)
	}
	if b, _ := json.Marshal(in); !strings.Contains(string(b), `"not_yet_made":true`) || !strings.Contains(string(b), `"sandbox":""`) {
		t.Errorf("inspect's JSON %s", b)
	}
}
