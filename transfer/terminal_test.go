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
	if _, err := TerminalInputKey("a/b", "exec-1"); err == nil {
		t.Error("a workflow id that is no path element has a terminal input key")
	}
}
