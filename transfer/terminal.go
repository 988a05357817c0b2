package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// A command on a terminal gets its input as an upload stream of the
// workflow that runs it (TerminalInputKey), through the relay: each part
// is one TerminalEvent, written once by the front end, in order from
// part 0; the worker running the command reads each part as it comes,
// feeds it to the terminal, and deletes it. A keystroke thus costs a
// relay write (a rejected Update, no history event) and a small object.
//
// An event is encoded as a byte saying what it is, then its payload:
// 'k' and the keys, or 'r' and the rows and columns, as big-endian
// uint16s.
const (
	eventKeys   byte = 'k'
	eventResize byte = 'r'
)

// TerminalPoll is how often the worker running a command on a terminal
// looks for new input, and stores its output for the front end, which
// asks for it as often.
const TerminalPoll = 10 * time.Millisecond

// MaxTerminalKeys bounds the keys of one event.
const MaxTerminalKeys = 16 << 10

// TerminalEvent is what a front end sends a command's terminal: keys
// typed, or a new size (Rows and Cols both set).
type TerminalEvent struct {
	Keys       []byte
	Rows, Cols uint16
}

// TerminalInputKey is the upload stream that carries the input of the
// command run by Update updateID of workflow workflowID.
func TerminalInputKey(workflowID, updateID string) (string, error) {
	prefix, err := UploadPrefix(workflowID)
	if err != nil {
		return "", err
	}
	if err := CheckUpload(prefix + "tty-" + updateID); err != nil {
		return "", err
	}
	return prefix + "tty-" + updateID, nil
}

// Encode gives the event as a part of a terminal's input stream.
func (e TerminalEvent) Encode() []byte {
	if e.Rows != 0 || e.Cols != 0 {
		b := []byte{eventResize, 0, 0, 0, 0}
		binary.BigEndian.PutUint16(b[1:], e.Rows)
		binary.BigEndian.PutUint16(b[3:], e.Cols)
		return b
	}
	return append([]byte{eventKeys}, e.Keys...)
}

// errBadEvent: a part that is no terminal event.
var errBadEvent = errors.New("transfer: not a terminal event")

// DecodeTerminalEvent reads a part of a terminal's input stream.
func DecodeTerminalEvent(b []byte) (TerminalEvent, error) {
	switch {
	case len(b) == 5 && b[0] == eventResize:
		return TerminalEvent{Rows: binary.BigEndian.Uint16(b[1:]), Cols: binary.BigEndian.Uint16(b[3:])}, nil
	case len(b) >= 1 && len(b) <= 1+MaxTerminalKeys && b[0] == eventKeys:
		return TerminalEvent{Keys: b[1:]}, nil
	}
	return TerminalEvent{}, fmt.Errorf("%w: %d bytes", errBadEvent, len(b))
}
