package randid

import (
	"regexp"
	"testing"
)

// TestHex: 2n lower-case hex characters, and no two alike.
func TestHex(t *testing.T) {
	hexRE := regexp.MustCompile(`^[0-9a-f]{20}$`)
	seen := map[string]bool{}
	for range 1000 {
		id := Hex(10)
		if !hexRE.MatchString(id) {
			t.Fatalf("Hex(10) = %q, want 20 lower-case hex characters", id)
		}
		if seen[id] {
			t.Fatalf("Hex(10) gave %q twice", id)
		}
		seen[id] = true
	}
}
