package ops

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/berth-dev/berth/transfer"
)

// TestEndedCommandsBound: a sandbox remembers at most MaxEndedCommands
// ended commands and MaxEndedInline bytes of their output inline, the
// newest first; an output stored whole loses its inline copy before a
// command is forgotten.
func TestEndedCommandsBound(t *testing.T) {
	inline := func(n int, stored bool) transfer.Output {
		o := transfer.Output{Inline: bytes.Repeat([]byte("x"), n), HeadLen: n, Size: int64(n)}
		if stored {
			o.Blob = "blob"
		}
		return o
	}
	held := func(c *Ops) int {
		n := 0
		for _, e := range c.ended {
			n += len(e.Output.Stdout.Inline) + len(e.Output.Stderr.Inline)
		}
		return n
	}
	t.Run("Count", func(t *testing.T) {
		c := &Ops{running: map[string]CommandStatus{}}
		for i := range 3 * MaxEndedCommands {
			c.end(fmt.Sprint("c", i), RunOutput{ExitCode: i, Stdout: inline(10, false)}, nil)
		}
		if len(c.ended) != MaxEndedCommands {
			t.Fatalf("remembers %d commands, want %d", len(c.ended), MaxEndedCommands)
		}
		if e, ok := c.findEnded(fmt.Sprint("c", 3*MaxEndedCommands-1)); !ok || e.Output.ExitCode != 3*MaxEndedCommands-1 {
			t.Errorf("the newest command is not remembered: %v %+v", ok, e)
		}
		if _, ok := c.findEnded(fmt.Sprint("c", 2*MaxEndedCommands-1)); ok {
			t.Errorf("an old command is still remembered")
		}
	})
	t.Run("Bytes", func(t *testing.T) {
		c := &Ops{running: map[string]CommandStatus{}}
		const each = 200 << 10
		for i := range 20 {
			// Even commands' outputs are stored whole, odd ones' only inline.
			c.end(fmt.Sprint("c", i), RunOutput{Stdout: inline(each, i%2 == 0), Stderr: inline(10, false)}, nil)
			if n := held(c); n > MaxEndedInline {
				t.Fatalf("after %d commands, %d bytes inline, over %d", i+1, n, MaxEndedInline)
			}
		}
		last, ok := c.findEnded("c19")
		if !ok || len(last.Output.Stdout.Inline) != each {
			t.Errorf("the newest command lost its output: %v, %d bytes", ok, len(last.Output.Stdout.Inline))
		}
		// A stored output, stripped, can still be had whole; one that
		// was only inline is never stripped, only forgotten with its
		// command.
		for _, e := range c.ended {
			if o := e.Output.Stdout; !o.Whole() {
				t.Errorf("%s: its output can no longer be had whole: %+v", e.Command, o)
			}
		}
		if _, ok := c.findEnded("c18"); !ok {
			t.Errorf("a recent command whose output is stored was forgotten rather than stripped")
		}
	})
}
