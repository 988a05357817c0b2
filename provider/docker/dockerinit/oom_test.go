package dockerinit

import "testing"

// TestThrashing: the guard kills after thrashPolls faulting polls while
// commands hold too much, through the gaps a loaded host leaves in a
// thrashing command's faults, but not for faults spread so thin that
// quietPolls pass between them, nor once what commands hold is back
// under what they may.
func TestThrashing(t *testing.T) {
	poll := func(g *memoryGuard, over, faulting bool, n int) (killed bool) {
		for range n {
			killed = g.thrashing(over, faulting) || killed
		}
		return killed
	}
	t.Run("steady", func(t *testing.T) {
		var g memoryGuard
		if poll(&g, true, true, thrashPolls-1) {
			t.Fatal("killed before thrashPolls faulting polls")
		}
		if !poll(&g, true, true, 1) {
			t.Fatal("not killed after thrashPolls faulting polls")
		}
	})
	t.Run("gaps", func(t *testing.T) {
		// Off the CPU for most polls: one faulting poll in every few.
		var g memoryGuard
		killed := false
		for range thrashPolls {
			killed = poll(&g, true, false, quietPolls-1) || killed
			killed = poll(&g, true, true, 1) || killed
		}
		if !killed {
			t.Fatal("a thrash with gaps shorter than quietPolls was not killed")
		}
	})
	t.Run("sparse", func(t *testing.T) {
		var g memoryGuard
		for range 3 * thrashPolls {
			if poll(&g, true, true, 1) || poll(&g, true, false, quietPolls) {
				t.Fatal("killed for faults quietPolls apart")
			}
		}
	})
	t.Run("under", func(t *testing.T) {
		var g memoryGuard
		for range 3 * thrashPolls {
			if poll(&g, true, true, thrashPolls-1) || poll(&g, false, true, 1) {
				t.Fatal("killed though commands went back under what they may hold between faults")
			}
		}
	})
}
