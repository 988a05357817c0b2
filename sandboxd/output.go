package sandboxd

// output is one stream of a command's output as the journal keeps it:
// the first headCap bytes and the last tailCap bytes, with absolute
// offsets. Bytes between the two are forgotten once the tail passes them.
type output struct {
	headCap, tailCap int
	head             []byte
	tail             []byte // ring buffer, allocated when the head is full
	total            int64  // bytes written so far
}

func newOutput(headCap, tailCap int) output {
	return output{headCap: headCap, tailCap: tailCap}
}

// lowest is the first offset held after the head: what a reader past the
// head can still read.
func (o *output) lowest() int64 { return o.lowestAfter(o.total) }

// lowestAfter is lowest as it would be once the stream reaches total.
func (o *output) lowestAfter(total int64) int64 {
	return max(int64(o.headCap), total-int64(o.tailCap))
}

func (o *output) write(p []byte) {
	if n := min(len(p), o.headCap-len(o.head)); n > 0 {
		o.head = append(o.head, p[:n]...)
		o.total += int64(n)
		p = p[n:]
	}
	if len(p) == 0 {
		return
	}
	if o.tail == nil {
		o.tail = make([]byte, o.tailCap)
	}
	if len(p) > o.tailCap {
		o.total += int64(len(p) - o.tailCap)
		p = p[len(p)-o.tailCap:]
	}
	for len(p) > 0 {
		at := int((o.total - int64(o.headCap)) % int64(o.tailCap))
		n := copy(o.tail[at:], p)
		o.total += int64(n)
		p = p[n:]
	}
}

// read copies bytes from offset off into dst. It returns how many it
// copied and, when off lies in the forgotten middle, how many bytes must
// be skipped first (and nothing copied).
func (o *output) read(off int64, dst []byte) (n int, skip int64) {
	if off >= o.total {
		return 0, 0
	}
	if off < int64(len(o.head)) {
		return copy(dst, o.head[off:]), 0
	}
	if low := o.lowest(); off < low {
		return 0, low - off
	}
	at := int((off - int64(o.headCap)) % int64(o.tailCap))
	end := len(o.tail)
	if avail := o.total - off; int64(end-at) > avail {
		end = at + int(avail)
	}
	return copy(dst, o.tail[at:end]), 0
}

// held is how many bytes of memory the stream's content takes.
func (o *output) held() int { return cap(o.head) + cap(o.tail) }

// release forgets everything but the count, for journal entries whose
// output has been evicted.
func (o *output) release() {
	o.head, o.tail = nil, nil
	o.headCap, o.tailCap = 0, 0
}
