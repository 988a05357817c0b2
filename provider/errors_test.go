package provider

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestKindRoundTrip(t *testing.T) {
	tests := []struct {
		err  error
		kind Kind
	}{
		{ErrNotFound, KindNotFound},
		{fmt.Errorf("exec: %w", ErrLost), KindLost},
		{ErrPaused, KindPaused},
		{fmt.Errorf("path: %w", ErrBadInput), KindBadInput},
		{fmt.Errorf("%w: %w", ErrBadInput, ErrCommandNotFound), KindCommandNotFound},
		{ErrTimeout, KindTimeout},
		{ErrOutOfMemory, KindOutOfMemory},
		{ErrUnsupported, KindUnsupported},
		{fmt.Errorf("sandbox x: %w", ErrAlreadyExists), KindAlreadyExists},
		{&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}, KindFileNotFound},
		{errors.New("disk on fire"), KindInternal},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			if got := KindOf(tt.err); got != tt.kind {
				t.Fatalf("KindOf(%v) = %s, want %s", tt.err, got, tt.kind)
			}
			back := Errorf(tt.kind, "%s", tt.err.Error())
			if got := KindOf(back); got != tt.kind {
				t.Errorf("KindOf(Errorf(%s)) = %s", tt.kind, got)
			}
			if back.Error() != tt.err.Error() {
				t.Errorf("message changed: %q, want %q", back.Error(), tt.err.Error())
			}
		})
	}
	if err := Errorf(KindCommandNotFound, "x"); !errors.Is(err, ErrBadInput) {
		t.Errorf("a command not found is not bad input: %v", err)
	}
}
