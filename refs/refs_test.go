package refs

import (
	"encoding/json"
	"testing"
	"time"
)

// TestJSON: a Sandbox is in the state of workflows running since before
// this package existed, and a Snapshot in activity results in history:
// each encodes as those still decode.
func TestJSON(t *testing.T) {
	for name, c := range map[string]struct {
		v    any
		want string
	}{
		"Sandbox": {Sandbox{Provider: "linux", ID: "sb-1", Queue: "q"}, `{"provider":"linux","id":"sb-1","queue":"q"}`},
		"SandboxMaxLifetime": {Sandbox{Provider: "agentcore", ID: "sb-1", Queue: "q", MaxLifetime: 8 * time.Hour},
			`{"provider":"agentcore","id":"sb-1","queue":"q","max_lifetime":28800000000000}`},
		"Snapshot": {Snapshot{ID: "s", Kind: "user", Created: time.Unix(1e9, 0).UTC(), Labels: map[string]string{"a": "b"},
			Files: 1, Size: 2, Stored: 3},
			`{"id":"s","kind":"user","created":"2001-09-09T01:46:40Z","labels":{"a":"b"},"files":1,"size":2,"stored":3}`},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(c.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != c.want {
				t.Errorf("encodes as %s, want %s", b, c.want)
			}
		})
	}
}
