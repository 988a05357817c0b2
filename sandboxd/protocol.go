package sandboxd

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/berth-dev/berth/provider"
)

// The daemon's HTTP routes. Paths in queries are workspace paths.
const (
	routeHealth    = "/v1/health"    // GET: Health
	routeExec      = "/v1/exec"      // POST: execHeader line, then stdin; answers frames
	routeSignal    = "/v1/signal"    // POST: signalRequest
	routeFile      = "/v1/file"      // GET ?path=: contents; PUT ?path=&mode=: write; DELETE ?path=
	routeDir       = "/v1/dir"       // GET ?path=: []provider.FileInfo
	routeWorkspace = "/v1/workspace" // GET: tar of the workspace; PUT: tar to unpack
	routeLease     = "/v1/lease"     // POST: renew the lease (any request does)
	routePause     = "/v1/pause"     // POST: stop every other process until resumed
	routeResume    = "/v1/resume"    // POST: continue them
	routeTTY       = "/v1/tty"       // POST ?id=: input to a command's terminal; PUT ?id=&rows=&cols=: resize
)

// execHeader starts an exec request's body, as one line of JSON; the rest
// of the body is the command's standard input.
type execHeader struct {
	ID      string            `json:"id"`
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout time.Duration     `json:"timeout,omitempty"`
	Stdin   bool              `json:"stdin,omitempty"` // the body carries stdin
	// TTY runs the command on a terminal (provider.ExecRequest.TTY).
	TTY          *provider.TerminalSize `json:"tty,omitempty"`
	StdoutOffset int64                  `json:"stdout_offset,omitempty"`
	StderrOffset int64                  `json:"stderr_offset,omitempty"`
}

// signalRequest asks for a signal to a command; see provider.Signaler.
type signalRequest struct {
	ID     string `json:"id"`
	Signal string `json:"signal"` // a name of provider.Signals
}

// An exec response is a sequence of frames: a type byte, a big-endian
// uint32 length, and that many bytes. It ends with frameResult or
// frameError.
const (
	frameStdout byte = 'o'
	frameStderr byte = 'e'
	// frameGap: payload is a stream byte and a big-endian int64 count of
	// bytes the journal no longer holds and that are skipped.
	frameGap    byte = 'g'
	frameResult byte = 'r' // payload: provider.ExecResult as JSON
	frameError  byte = 'x' // payload: wireError as JSON
)

// maxFrame bounds the frames a client accepts, so a broken or hostile
// daemon cannot make it allocate without limit.
const maxFrame = 1 << 20

// wireError is how errors cross the socket.
type wireError struct {
	Kind    errdefs.Kind `json:"kind"`
	Message string       `json:"message"`
}

func (e wireError) err() error { return errdefs.Errorf(e.Kind, "%s", e.Message) }

func toWire(err error) wireError {
	return wireError{Kind: errdefs.KindOf(err), Message: err.Error()}
}

// Health is what the daemon says about itself.
type Health struct {
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	Running   int       `json:"running"`          // commands running now
	Paused    bool      `json:"paused,omitempty"` // by Pause, until Resume
}

func writeFrame(w io.Writer, typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

func writeJSONFrame(w io.Writer, typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFrame(w, typ, b)
}

// readFrame reads one frame into buf, growing it as needed.
func readFrame(r io.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, buf, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, buf, fmt.Errorf("sandboxd: frame of %d bytes exceeds %d", n, maxFrame)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, buf, noEOF(err)
	}
	return hdr[0], buf, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
