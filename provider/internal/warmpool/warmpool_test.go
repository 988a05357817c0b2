package warmpool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake counts what a Pool does with the warm ones it starts: each is a
// number, unique among all started.
type fake struct {
	started   atomic.Int64
	mu        sync.Mutex
	discarded map[int64]int
	dead      map[int64]bool
}

func newPool(size int, f *fake) *Pool[int64] {
	f.discarded = map[int64]int{}
	f.dead = map[int64]bool{}
	return &Pool[int64]{
		Size:  size,
		Start: func(context.Context) (int64, error) { return f.started.Add(1), nil },
		Alive: func(w int64) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return !f.dead[w]
		},
		Discard: func(w int64) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.discarded[w]++
		},
		Log:  slog.New(slog.DiscardHandler),
		What: "a test one",
	}
}

// waitFor waits until cond holds: a pool fills in goroutines of its own.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func full(pl *Pool[int64], n int) func() bool {
	return func() bool { r, f := pl.Counts(); return r == n && f == 0 }
}

func TestConcurrentTakesHandEachOutOnce(t *testing.T) {
	const size, takers = 8, 32
	f := &fake{}
	pl := newPool(size, f)
	t.Cleanup(pl.Close)
	pl.Refill()
	waitFor(t, "the pool to fill", full(pl, size))

	var (
		mu    sync.Mutex
		taken = map[int64]int{}
		start = make(chan struct{})
		wg    sync.WaitGroup
	)
	for range takers {
		wg.Go(func() {
			<-start
			if w, ok := pl.Take(); ok {
				mu.Lock()
				taken[w]++
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()

	if len(taken) < size {
		t.Errorf("%d takers got %d warm ones, want at least the %d ready", takers, len(taken), size)
	}
	for w, n := range taken {
		if n != 1 {
			t.Errorf("warm one %d handed out %d times", w, n)
		}
	}
	pl.Close()
	for w := range taken {
		if f.discarded[w] != 0 {
			t.Errorf("warm one %d was taken and then discarded by Close", w)
		}
	}
}

func TestTakeSkipsAndDiscardsTheDead(t *testing.T) {
	tests := []struct {
		name string
		dead []int64 // of 1..3; Take pops the newest first
		want int64   // 0: none
	}{
		{"none dead", nil, 3},
		{"newest dead", []int64{3}, 2},
		{"two newest dead", []int64{3, 2}, 1},
		{"all dead", []int64{1, 2, 3}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fake{}
			pl := newPool(3, f)
			pl.Refill()
			waitFor(t, "the pool to fill", full(pl, 3))
			// Pin the order: starting goroutines may append in any order.
			pl.mu.Lock()
			pl.ready = []int64{1, 2, 3}
			pl.mu.Unlock()
			f.mu.Lock()
			for _, d := range tt.dead {
				f.dead[d] = true
			}
			f.mu.Unlock()

			w, ok := pl.Take()
			if got := map[bool]int64{true: w, false: 0}[ok]; got != tt.want {
				t.Errorf("Take = %d, %v; want %d", w, ok, tt.want)
			}
			pl.Close() // waits for the discards Take began
			for _, d := range tt.dead {
				if f.discarded[d] != 1 {
					t.Errorf("dead one %d discarded %d times, want once", d, f.discarded[d])
				}
			}
			if ok && f.discarded[w] != 0 {
				t.Errorf("taken one %d was discarded", w)
			}
		})
	}
}

func TestCloseDiscardsReadyAndStarting(t *testing.T) {
	f := &fake{}
	pl := newPool(2, f)
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	start := pl.Start
	pl.Start = func(ctx context.Context) (int64, error) {
		entered <- struct{}{}
		<-release
		return start(ctx)
	}
	pl.Refill()
	<-entered
	<-entered
	// One finishes before Close, one while Close waits.
	release <- struct{}{}
	waitFor(t, "one to be ready", func() bool { r, _ := pl.Counts(); return r == 1 })

	closed := make(chan struct{})
	go func() { pl.Close(); close(closed) }()
	waitFor(t, "Close to begin", func() bool { pl.mu.Lock(); defer pl.mu.Unlock(); return pl.closed })
	select {
	case <-closed:
		t.Fatal("Close returned while one was still starting")
	default:
	}
	close(release)
	<-closed

	if got := f.started.Load(); got != 2 {
		t.Fatalf("started %d, want 2", got)
	}
	for w := range int64(2) {
		if f.discarded[w+1] != 1 {
			t.Errorf("warm one %d discarded %d times after Close, want once", w+1, f.discarded[w+1])
		}
	}
	if r, fl := pl.Counts(); r != 0 || fl != 0 {
		t.Errorf("after Close: %d ready, %d starting; want none", r, fl)
	}
	pl.Refill()
	if r, fl := pl.Counts(); r != 0 || fl != 0 {
		t.Errorf("Refill after Close: %d ready, %d starting; want none", r, fl)
	}
}

func TestFailedStartsAreNotReady(t *testing.T) {
	f := &fake{}
	pl := newPool(3, f)
	t.Cleanup(pl.Close)
	var calls atomic.Int64
	pl.Start = func(context.Context) (int64, error) {
		if calls.Add(1) == 2 {
			return 0, errors.New("no room")
		}
		return calls.Load(), nil
	}
	pl.Refill()
	waitFor(t, "the starts to end", func() bool { _, fl := pl.Counts(); return calls.Load() == 3 && fl == 0 })
	if r, _ := pl.Counts(); r != 2 {
		t.Errorf("%d ready after one start of 3 failed, want 2", r)
	}
	for range 2 {
		if w, ok := pl.Take(); !ok || w == 2 {
			t.Errorf("Take = %d, %v; want a started one", w, ok)
		}
	}
}

func TestSizeZeroKeepsNone(t *testing.T) {
	for _, size := range []int{0, -1} {
		f := &fake{}
		pl := newPool(size, f)
		pl.Refill()
		if _, ok := pl.Take(); ok {
			t.Errorf("size %d: Take found one", size)
		}
		pl.Close()
		if n := f.started.Load(); n != 0 {
			t.Errorf("size %d: started %d", size, n)
		}
	}
}
