package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

// wire pins every kind's string: Temporal histories written before hold
// them, and running workflows match on them.
var wire = map[Kind]string{
	NotFound: "NotFound", SandboxLost: "SandboxLost", SandboxPaused: "SandboxPaused",
	BadInput: "BadInput", CommandNotFound: "CommandNotFound", Timeout: "Timeout",
	OutOfMemory: "OutOfMemory", Unsupported: "Unsupported", FileNotFound: "FileNotFound",
	AlreadyExists: "AlreadyExists", Canceled: "Canceled", Terminated: "Terminated",
	ModelUnavailable: "ModelUnavailable", NoModel: "NoModel", ModelAuth: "ModelAuth",
	ModelRejected: "ModelRejected", BadModelAnswer: "BadModelAnswer",
	BadConversation: "BadConversation", AnswerTooLarge: "AnswerTooLarge",
	ProviderUnavailable: "ProviderUnavailable", ProviderAuth: "ProviderAuth", Quota: "Quota",
	StoreUnavailable: "StoreUnavailable",
}

func TestWireStrings(t *testing.T) {
	if len(Kinds()) != len(wire) {
		t.Errorf("%d kinds, %d pinned: pin the new one's string here", len(Kinds()), len(wire))
	}
	for _, k := range Kinds() {
		if want, ok := wire[k]; !ok || string(k) != want {
			t.Errorf("kind %q: wire string %q", k, want)
		}
	}
	if Internal != "Internal" {
		t.Errorf("Internal is %q", Internal)
	}
}

func TestErrorfKindOf(t *testing.T) {
	for _, k := range append(Kinds(), Internal) {
		t.Run(string(k), func(t *testing.T) {
			err := Errorf(k, "sandbox %s: %d", "sbx-1", 7)
			if got := KindOf(err); got != k {
				t.Errorf("KindOf(Errorf(%s)) = %s", k, got)
			}
			if err.Error() != "sandbox sbx-1: 7" {
				t.Errorf("message %q, want it verbatim", err)
			}
			wrapped := fmt.Errorf("exec: %w", err)
			if got := KindOf(wrapped); got != k {
				t.Errorf("KindOf(wrapped) = %s, want %s", got, k)
			}
			if !k.Known() {
				t.Errorf("%s is not Known", k)
			}
		})
	}
}

func TestKindOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want Kind
	}{
		{"nil", nil, Internal},
		{"plain", errors.New("boom"), Internal},
		{"sentinel", ErrSandboxLost, SandboxLost},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", ErrTimeout)), Timeout},
		{"file", fmt.Errorf("read: %w", fs.ErrNotExist), FileNotFound},
		{"path error", &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}, FileNotFound},
		{"command not found before bad input", fmt.Errorf("%w: %w", ErrBadInput, ErrCommandNotFound), CommandNotFound},
		{"joined", errors.Join(errors.New("x"), ErrOutOfMemory), OutOfMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.err); got != tc.want {
				t.Errorf("KindOf(%v) = %s, want %s", tc.err, got, tc.want)
			}
		})
	}
}

func TestCommandNotFoundIsBadInput(t *testing.T) {
	for name, err := range map[string]error{
		"Errorf": Errorf(CommandNotFound, "no such program"),
		"Wrap":   Wrap(errors.New("no such program"), CommandNotFound),
	} {
		if !errors.Is(err, ErrBadInput) || !errors.Is(err, ErrCommandNotFound) {
			t.Errorf("%s: %v is not both bad input and command not found", name, err)
		}
	}
}

func TestUnknownKind(t *testing.T) {
	if Kind("NoSuchKind").Known() {
		t.Error("an unknown kind is Known")
	}
	if Kind("").Known() {
		t.Error("the empty kind is Known")
	}
	err := Errorf("NoSuchKind", "odd")
	if KindOf(err) != Internal || err.Error() != "odd" {
		t.Errorf("Errorf of an unknown kind: %v, kind %s", err, KindOf(err))
	}
}

type marked struct{ error }

func TestWrapKeepsChain(t *testing.T) {
	inner := marked{errors.New("the server said no")}
	for _, k := range Kinds() {
		err := Wrap(inner, k)
		if KindOf(err) != k {
			t.Errorf("KindOf(Wrap(_, %s)) = %s", k, KindOf(err))
		}
		var m marked
		if !errors.As(err, &m) || err.Error() != inner.Error() || errors.Unwrap(err) != error(inner) {
			t.Errorf("Wrap(_, %s) = %v lost the error it wraps", k, err)
		}
	}
	if err := Wrap(inner, Internal); err != error(inner) {
		t.Errorf("Wrap(_, Internal) = %#v, want the error itself", err)
	}
	if Wrap(nil, NotFound) != nil {
		t.Error("Wrap(nil) is not nil")
	}
}

func TestRetryable(t *testing.T) {
	for _, k := range append(Kinds(), Internal) {
		want := k == Internal || k == ModelUnavailable || k == ProviderUnavailable
		if k.Retryable() != want {
			t.Errorf("%s.Retryable() = %v", k, !want)
		}
	}
}
