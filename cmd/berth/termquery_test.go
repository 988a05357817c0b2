package main

import (
	"strings"
	"testing"
	"time"
)

// TestNoTerminalQuery runs berth commands on a terminal that never
// answers a query, as a serial console or a terminal behind some
// multiplexers does: none asks the terminal anything (Bubble Tea's init
// would ask for its background colour and wait 5 s for the answer), and
// each ends well within that wait.
func TestNoTerminalQuery(t *testing.T) {
	berth := berthBinary(t)
	// A terminal that termenv would query: screen, tmux and dumb it does
	// not ask.
	t.Setenv("TERM", "xterm-256color")
	for _, args := range [][]string{{"version"}, {"--help"}, {"sandbox", "ls", "--help"}} {
		start := time.Now()
		p := startOnPTY(t, berth, 24, 80, args...)
		code := p.wait(t)
		took := time.Since(start)
		screen := p.String()
		if code != 0 {
			t.Errorf("berth %s: exit %d; screen %q", strings.Join(args, " "), code, screen)
		}
		// OSC 11 asks for the background colour, CSI 6n for the cursor.
		if strings.Contains(screen, "\x1b]11;") || strings.Contains(screen, "\x1b[6n") {
			t.Errorf("berth %s asked the terminal: screen %q", strings.Join(args, " "), screen)
		}
		if took > 2*time.Second {
			t.Errorf("berth %s took %v on a terminal that does not answer, want under 2s", strings.Join(args, " "), took.Round(time.Millisecond))
		}
	}
}
