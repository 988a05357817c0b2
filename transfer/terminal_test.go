package transfer

import (
	"bytes"
	"testing"
)

func TestTerminalEvents(t *testing.T) {
	for _, ev := range []TerminalEvent{{Keys: []byte("ls\r")}, {Keys: []byte{3}}, {Rows: 40, Cols: 120}} {
		got, err := DecodeTerminalEvent(ev.Encode())
		if err != nil || !bytes.Equal(got.Keys, ev.Keys) || got.Rows != ev.Rows || got.Cols != ev.Cols {
			t.Errorf("%+v: decoded %+v, %v", ev, got, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":         nil,
		"unknown":       []byte("zabc"),
		"short size":    {'r', 0, 1},
		"long size":     {'r', 0, 1, 0, 1, 0},
		"too many keys": append([]byte{'k'}, make([]byte, MaxTerminalKeys+1)...),
	} {
		if _, err := DecodeTerminalEvent(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	// A session's workflow id (berth-sessions/s1) is escaped into one
	// path element, as its uploads are: its terminal has a key too.
	if _, err := TerminalInputKey("berth-sessions/s1", "exec-1"); err != nil {
		t.Errorf("a session's terminal input key: %v", err)
	}
}
