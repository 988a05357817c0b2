package activities

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery checks the live-output timer: it fires again and again, and
// once end returns no call is under way or comes later.
func TestEvery(t *testing.T) {
	calls := make(chan struct{}, 1)
	var ended, active atomic.Bool
	end := every(time.Millisecond, func() {
		active.Store(true)
		defer active.Store(false)
		if ended.Load() {
			t.Error("called after end returned")
		}
		select {
		case calls <- struct{}{}:
		default:
		}
	})
	for range 3 {
		<-calls
	}
	end()
	ended.Store(true)
	if active.Load() {
		t.Error("a call was under way when end returned")
	}
	// A timer that fired just before end finds it ended: give it the
	// periods in which it would call f again.
	time.Sleep(10 * time.Millisecond)
}
