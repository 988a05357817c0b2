package remotefake

import (
	"io"
	"sync"
)

// pipeBuffer bounds what one of a process's output streams keeps unread.
// Past it the stream's copier waits for the reader, and so does the
// process once the engine's buffers fill too, as at a full pipe.
const pipeBuffer = 4 << 20

// pipe is an in-memory pipe that holds up to pipeBuffer bytes before its
// writer waits: the process's output is never lost, and nobody reading
// it for a while does not block the process at once.
type pipe struct {
	mu     sync.Mutex
	cond   sync.Cond
	buf    []byte
	err    error // the writer's close: io.EOF or its error
	closed bool  // the reader's close
}

func newPipe() *pipe {
	p := &pipe{}
	p.cond.L = &p.mu
	return p
}

func (p *pipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for len(b) > 0 {
		for len(p.buf) >= pipeBuffer && !p.closed {
			p.cond.Wait()
		}
		if p.closed {
			// Nobody reads any more: what follows is dropped, so that
			// the process's other stream goes on.
			return n + len(b), nil
		}
		k := min(len(b), pipeBuffer-len(p.buf))
		p.buf = append(p.buf, b[:k]...)
		b = b[k:]
		n += k
		p.cond.Broadcast()
	}
	return n, nil
}

// closeWrite ends the stream: the reader gets err (nil: io.EOF) once it
// has read what is buffered.
func (p *pipe) closeWrite(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	if p.err == nil {
		p.err = err
	}
	p.cond.Broadcast()
}

func (p *pipe) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.buf) == 0 && p.err == nil && !p.closed {
		p.cond.Wait()
	}
	if p.closed {
		return 0, io.ErrClosedPipe
	}
	if len(p.buf) == 0 {
		return 0, p.err
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	if len(p.buf) == 0 {
		p.buf = nil // let a large buffer go
	}
	p.cond.Broadcast()
	return n, nil
}

// Close says the reader reads no more.
func (p *pipe) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.buf = nil
	p.cond.Broadcast()
	return nil
}
