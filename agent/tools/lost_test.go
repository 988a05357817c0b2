package tools

import (
	"errors"
	"strings"
	"testing"

	"github.com/berth-dev/berth/errdefs"
	"github.com/berth-dev/berth/sandbox"
)

// TestLostCall: a call that found the sandbox lost tells the model, in
// one line, that it did not complete and is not run again, where the
// workspace is now, and what else is gone; other errors pass through.
func TestLostCall(t *testing.T) {
	cause := errors.New("activity error (type: Exec, scheduledEventID: 32): activity ScheduleToStart timeout")
	cases := []struct {
		name string
		err  *sandbox.LostError
		want []string
	}{
		{"checkpoint", &sandbox.LostError{Sandbox: "sb-1", Checkpoint: "sb-s3", Lost: []string{"write d.txt", "exec make"}, Recovered: true, Err: cause},
			[]string{"not run again", "last checkpoint (sb-s3)", "gone too: write d.txt; exec make"}},
		{"no checkpoint", &sandbox.LostError{Sandbox: "sb-1", Recovered: true, Err: cause},
			[]string{"not run again", "as it was first made"}},
		{"not recovered", &sandbox.LostError{Sandbox: "sb-1", Err: cause},
			[]string{"not run again", "could not be made again"}},
		{"not started", &sandbox.LostError{Sandbox: "sb-1", Checkpoint: "sb-s1", Recovered: true, NotStarted: true, Err: cause},
			[]string{"before this call reached it", "did not run", "last checkpoint (sb-s1)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := lostCall(tc.err)
			msg := err.Error()
			if !errors.Is(err, errdefs.ErrSandboxLost) || strings.Contains(msg, "\n") || strings.Contains(msg, "scheduledEventID") {
				t.Errorf("%q: want one line of SandboxLost without Temporal's wrappers", msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("%q: want it to say %q", msg, w)
				}
			}
		})
	}
	other := errors.New("no such file")
	if err := lostCall(other); err != other {
		t.Errorf("another error became %v", err)
	}
}
