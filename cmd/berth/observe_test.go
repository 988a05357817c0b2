package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/agent"
)

// TestSessionShowSeconds: session show says how long the session's
// sandbox was held and active, the running stretch counted up to now,
// in its text and in its JSON.
func TestSessionShowSeconds(t *testing.T) {
	var st agent.State
	st.Status, st.Sandbox.State = "idle", "running"
	st.Sandbox.Held, st.Sandbox.Active = 2500*time.Millisecond, 250*time.Millisecond
	var b bytes.Buffer
	if err := printState(&b, "s1", st); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(b.String(), "\n"); first != "session s1: idle, sandbox running (held 2.5s, active 0.25s), 0 messages, 0 tokens" {
		t.Errorf("first line: %q", first)
	}
	now := time.Now()
	st.Sandbox.HeldSince = now.Add(-time.Minute)
	held, active := sandboxSeconds(st, now)
	if held != 62.5 || active != 0.25 {
		t.Errorf("held %v, active %v; want 62.5 (2.5 and the minute since) and 0.25", held, active)
	}
	out, err := json.Marshal(shownState{State: st, HeldSeconds: held, ActiveSeconds: active})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if back["held_seconds"] != 62.5 || back["active_seconds"] != 0.25 || back["status"] != "idle" || back["sandbox"] == nil {
		t.Errorf("session show -o json: %s", out)
	}
}
