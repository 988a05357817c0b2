package main

import (
	"strings"
	"testing"
)

// TestEventsKeepRunesWhole: a rune cut between two writes is sent whole,
// with the write that completes it; what is left at the end is flushed;
// each stream keeps its own pending bytes.
func TestEventsKeepRunesWhole(t *testing.T) {
	var b strings.Builder
	e := &events{w: &b}
	out, errw := e.stream(0), e.stream(1)
	euro := []byte("€") // 3 bytes
	out.Write(append([]byte("a"), euro[:1]...))
	errw.Write([]byte("x"))
	out.Write(euro[1:2])
	out.Write(append(euro[2:], 'b'))
	out.Write(euro[:2])
	if err := e.flush(); err != nil {
		t.Fatal(err)
	}
	want := `{"stream":"stdout","data":"a"}
{"stream":"stderr","data":"x"}
{"stream":"stdout","data":"€b"}
{"stream":"stdout","data":"\ufffd\ufffd"}
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
