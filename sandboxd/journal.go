package sandboxd

import (
	"container/list"
	"context"
	"sync"

	"github.com/berth-dev/berth/provider"
)

// OutputCap is how many bytes of the head, and of the tail, of each output
// stream the journal keeps for callers that re-attach.
const OutputCap = 256 << 10

// Streams, as indexes into record.out.
const (
	stdout = 0
	stderr = 1
)

// record is one command in the journal.
type record struct {
	id string

	mu      sync.Mutex
	pid     int       // the command's, once started
	cond    sync.Cond // signalled on new output, a reader's progress, the end
	out     [2]output
	readers map[*reader]struct{}
	done    bool // the command ended and its output is complete
	result  provider.ExecResult
	err     error // the command could not start
	evicted bool  // its output was dropped to bound the journal
}

// reader is one caller attached to a record.
type reader struct {
	off       [2]int64
	truncated bool
}

func newRecord(id string, outputCap int) *record {
	r := &record{id: id, readers: map[*reader]struct{}{}}
	r.cond.L = &r.mu
	r.out[stdout] = newOutput(outputCap, outputCap)
	r.out[stderr] = newOutput(outputCap, outputCap)
	return r
}

// append adds output to stream s. While a reader is attached it waits
// rather than forget bytes that reader has not read yet: a live caller
// gets everything, and the command feels the backpressure as a full pipe.
func (r *record) append(s int, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.wouldLose(s, len(p)) {
		r.cond.Wait()
	}
	r.out[s].write(p)
	r.cond.Broadcast()
}

func (r *record) wouldLose(s, n int) bool {
	o := &r.out[s]
	low := o.lowestAfter(o.total + int64(n))
	for rd := range r.readers {
		if low > max(rd.off[s], int64(o.headCap)) {
			return true
		}
	}
	return false
}

// finish records the command's end; its output is complete.
func (r *record) finish(res provider.ExecResult, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res.ID = r.id
	res.StdoutBytes = r.out[stdout].total
	res.StderrBytes = r.out[stderr].total
	r.result, r.err, r.done = res, err, true
	r.cond.Broadcast()
}

// attach registers a reader starting at the given offsets.
func (r *record) attach(off [2]int64) *reader {
	rd := &reader{off: off}
	r.mu.Lock()
	r.readers[rd] = struct{}{}
	r.mu.Unlock()
	return rd
}

func (r *record) detach(rd *reader) {
	r.mu.Lock()
	delete(r.readers, rd)
	r.cond.Broadcast()
	r.mu.Unlock()
}

// chunk is what a reader takes from the record in one step.
type chunk struct {
	data [2][]byte
	skip [2]int64
	end  bool // the command is done and the reader has everything
}

// next waits until the record has something for rd and copies it into
// bufs. It returns false when ctx ends first.
func (r *record) next(ctx context.Context, rd *reader, bufs *[2][]byte) (chunk, bool) {
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	})
	defer stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if ctx.Err() != nil {
			return chunk{}, false
		}
		var c chunk
		progress := false
		for s := range 2 {
			n, skip := r.out[s].read(rd.off[s], bufs[s])
			c.data[s], c.skip[s] = bufs[s][:n], skip
			rd.off[s] += int64(n) + skip
			progress = progress || n > 0 || skip > 0
			if skip > 0 {
				rd.truncated = true
			}
		}
		if progress {
			r.cond.Broadcast() // a writer may be waiting for this reader
			return c, true
		}
		if r.done {
			c.end = true
			return c, true
		}
		r.cond.Wait()
	}
}

// journal is the daemon's record of commands by id. It keeps every id it
// has seen, so no id ever runs twice, and the output of the most recent
// commands up to a byte budget.
type journal struct {
	outputCap int
	budget    int // bytes of output kept for finished commands

	mu       sync.Mutex
	records  map[string]*record
	finished *list.List // of *record, oldest first, output not yet evicted
	held     int
}

func newJournal(outputCap, budget int) *journal {
	return &journal{
		outputCap: outputCap,
		budget:    budget,
		records:   map[string]*record{},
		finished:  list.New(),
	}
}

// claim returns the record for id, and whether the caller created it and
// so must run the command.
func (j *journal) claim(id string) (*record, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r, ok := j.records[id]; ok {
		return r, false
	}
	r := newRecord(id, j.outputCap)
	j.records[id] = r
	return r, true
}

// find returns the record for id, or nil when the daemon never saw it.
func (j *journal) find(id string) *record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.records[id]
}

// retire counts a finished record's output against the budget and evicts
// the oldest output beyond it.
func (j *journal) retire(r *record) {
	r.mu.Lock()
	size := r.out[stdout].held() + r.out[stderr].held()
	r.mu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	j.finished.PushBack(r)
	j.held += size
	for j.held > j.budget && j.finished.Len() > 0 {
		old := j.finished.Remove(j.finished.Front()).(*record)
		old.mu.Lock()
		j.held -= old.out[stdout].held() + old.out[stderr].held()
		if len(old.readers) == 0 {
			old.out[stdout].release()
			old.out[stderr].release()
			old.evicted = true
		}
		old.mu.Unlock()
	}
}
