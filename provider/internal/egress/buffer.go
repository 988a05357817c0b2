package egress

import "sync"

// budgets are a sandbox's relay buffer budget (Config.RelayBuffer): the
// floors its connections start with (connFloor each, for as many as it
// may open), and what is left, which they grow into. Every byte a
// connection's buffers may hold is taken from them before the buffers
// are set that large, and given back when the connection ends, so that
// all of a sandbox's connections together never hold more than the
// budget, however many it opens and whether or not it reads; and the
// connections that grew first leave the floors of the others.
type budgets struct {
	floors, growth budget
}

func newBudgets(total int64, maxConns int) *budgets {
	floors := min(total, int64(maxConns)*connFloor)
	return &budgets{floors: budget{free: floors}, growth: budget{free: total - floors}}
}

// budget is bytes of a budget no connection holds.
type budget struct {
	mu   sync.Mutex
	free int64
}

// take takes n bytes, or nothing and false if fewer are free.
func (b *budget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.free {
		return false
	}
	b.free -= n
	return true
}

// give gives n bytes back.
func (b *budget) give(n int64) {
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
}
