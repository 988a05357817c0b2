package providertest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// The exactly-once tests stand in for an activity retried after its
// worker crashed: the retry sends the same request id and must get the
// first run's result, never a second run. Each command appends a line to
// a log, so the log's length counts the runs.

func onceTests() []test {
	return []test{
		{name: "Sequential", fn: testOnceSequential},
		{name: "FreshIDs", fn: testOnceFreshIDs},
		{name: "ConcurrentAttach", fn: testOnceConcurrentAttach},
		{name: "ConcurrentStart", fn: testOnceConcurrentStart},
		{name: "Offset", fn: testOnceOffset},
		{name: "AttachAfterCancel", fn: testOnceAttachAfterCancel},
	}
}

// checkRuns fails the test unless the command that logs to log ran want
// times.
func checkRuns(t *testing.T, sb provider.Sandbox, log string, want int) {
	t.Helper()
	got := readFile(t, sb, log)
	if lines := bytes.Count(got, []byte("\n")); lines != want {
		t.Errorf("the command ran %d times (%s holds %q), want %d", lines, log, got, want)
	}
}

// checkAttached fails the test unless got is an attach to the run want
// describes: Attached set, same exit code and output.
func checkAttached(t *testing.T, what string, got, want result) {
	t.Helper()
	if !got.Attached {
		t.Errorf("%s: Attached = false, want true", what)
	}
	checkSameRun(t, what, got, want)
}

// checkSameRun fails the test unless got has want's exit code and output.
func checkSameRun(t *testing.T, what string, got, want result) {
	t.Helper()
	if got.ExitCode != want.ExitCode {
		t.Errorf("%s: exit code %d, want %d", what, got.ExitCode, want.ExitCode)
	}
	if got.stdout != want.stdout {
		t.Errorf("%s: stdout %q, want %q", what, got.stdout, want.stdout)
	}
	if got.stderr != want.stderr {
		t.Errorf("%s: stderr %q, want %q", what, got.stderr, want.stderr)
	}
}

func testOnceSequential(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	req := provider.ExecRequest{ID: "once-1", Shell: "echo ran >> once.log; echo out; echo err >&2; exit 7"}
	first, err := execute(t, sb, req)
	if err != nil {
		t.Fatalf("first Exec: %v", err)
	}
	if first.Attached {
		t.Errorf("the first Exec of request %q reports Attached", req.ID)
	}
	if first.ID != req.ID {
		t.Errorf("ExecResult.ID = %q, want the request's %q", first.ID, req.ID)
	}
	want := result{ExecResult: provider.ExecResult{ExitCode: 7}, stdout: "out\n", stderr: "err\n"}
	checkSameRun(t, "first Exec", first, want)

	second, err := execute(t, sb, req)
	if err != nil {
		t.Fatalf("second Exec of request %q: %v", req.ID, err)
	}
	if second.ID != req.ID {
		t.Errorf("second ExecResult.ID = %q, want %q", second.ID, req.ID)
	}
	checkAttached(t, "second Exec of the same request", second, want)
	if second.StdoutBytes != first.StdoutBytes {
		t.Errorf("StdoutBytes: %d on the run, %d on the attach", first.StdoutBytes, second.StdoutBytes)
	}
	if second.StderrBytes != first.StderrBytes {
		t.Errorf("StderrBytes: %d on the run, %d on the attach", first.StderrBytes, second.StderrBytes)
	}
	checkRuns(t, sb, "once.log", 1)
}

// testOnceFreshIDs checks that requests without an id each run, and get an
// id a caller can re-attach with.
func testOnceFreshIDs(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	req := provider.ExecRequest{Shell: "echo ran >> fresh.log; echo out"}
	first, err := execute(t, sb, req)
	if err != nil {
		t.Fatalf("first Exec: %v", err)
	}
	second, err := execute(t, sb, req)
	if err != nil {
		t.Fatalf("second Exec: %v", err)
	}
	checkRuns(t, sb, "fresh.log", 2)
	if first.Attached || second.Attached {
		t.Errorf("requests without an id report Attached: %v, %v; want two fresh runs", first.Attached, second.Attached)
	}
	if first.ID == "" {
		t.Fatalf("ExecResult.ID is empty for a request without an id; want the fresh id the provider chose")
	}
	if first.ID == second.ID {
		t.Fatalf("two requests without an id both got the id %q", first.ID)
	}
	again, err := execute(t, sb, provider.ExecRequest{ID: first.ID, Shell: req.Shell})
	if err != nil {
		t.Fatalf("Exec with the id %q the provider chose: %v", first.ID, err)
	}
	checkAttached(t, "Exec with the id the provider chose", again, first)
	checkRuns(t, sb, "fresh.log", 2)
}

func testOnceConcurrentAttach(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	req := provider.ExecRequest{ID: "slow", Shell: "echo started; sleep 1; echo ran >> slow.log; echo done"}
	want := "started\ndone\n"

	stdout := newSignalWriter()
	firstReq := req
	firstReq.Stdout = stdout
	firstDone := make(chan outcome, 1)
	go func() {
		r, err := executeCtx(timeout(t, opTimeout), sb, firstReq)
		firstDone <- outcome{r, err}
	}()

	var first outcome
	select {
	case <-stdout.first:
	case first = <-firstDone:
		t.Fatalf("the command ended before its first output reached the caller: %+v, err %v", first.r, first.err)
	}
	second, err := execute(t, sb, req)
	if err != nil {
		t.Fatalf("Exec of running request %q: %v", req.ID, err)
	}
	first = <-firstDone
	if first.err != nil {
		t.Fatalf("first Exec: %v", first.err)
	}
	if first.r.Attached || !second.Attached {
		t.Errorf("Attached: first %v, second %v; want false, true", first.r.Attached, second.Attached)
	}
	if stdout.String() != want || second.stdout != want {
		t.Errorf("stdout: first %q, second %q; want both %q", stdout.String(), second.stdout, want)
	}
	if first.r.ExitCode != 0 || second.ExitCode != 0 {
		t.Errorf("exit codes: first %d, second %d; want 0", first.r.ExitCode, second.ExitCode)
	}
	checkRuns(t, sb, "slow.log", 1)
}

// outcome is what one of several concurrent Execs got.
type outcome struct {
	r   result
	err error
}

// testOnceConcurrentStart races several first attempts of one request, as
// a retry racing a request that is still arriving.
func testOnceConcurrentStart(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	req := provider.ExecRequest{ID: "race", Shell: "echo ran >> race.log; sleep 0.5; echo out"}
	const n = 4
	var (
		wg       sync.WaitGroup
		start    = make(chan struct{})
		outcomes [n]outcome
	)
	for i := range n {
		wg.Go(func() {
			<-start
			r, err := executeCtx(timeout(t, opTimeout), sb, req)
			outcomes[i] = outcome{r, err}
		})
	}
	close(start)
	wg.Wait()
	ran := 0
	for i, o := range outcomes {
		if o.err != nil {
			t.Errorf("Exec %d of request %q: %v", i, req.ID, o.err)
			continue
		}
		if !o.r.Attached {
			ran++
		}
		if o.r.stdout != "out\n" || o.r.ExitCode != 0 {
			t.Errorf("Exec %d: stdout %q, exit code %d; want %q, 0", i, o.r.stdout, o.r.ExitCode, "out\n")
		}
	}
	if ran != 1 {
		t.Errorf("%d of %d concurrent Execs of one request report Attached = false, want exactly 1", ran, n)
	}
	checkRuns(t, sb, "race.log", 1)
}

func testOnceOffset(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	req := provider.ExecRequest{ID: "offset", Shell: "printf 0123456789; printf abcdefghij >&2"}
	if _, err := execute(t, sb, req); err != nil {
		t.Fatalf("first Exec: %v", err)
	}
	tests := []struct {
		name                   string
		stdoutOff, stderrOff   int64
		wantStdout, wantStderr string
	}{
		{"Zero", 0, 0, "0123456789", "abcdefghij"},
		{"Middle", 4, 7, "456789", "hij"},
		{"End", 10, 10, "", ""},
		{"PastEnd", 100, 11, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := req
			r.StdoutOffset, r.StderrOffset = tt.stdoutOff, tt.stderrOff
			got, err := execute(t, sb, r)
			if err != nil {
				t.Fatalf("re-attach with offsets %d/%d: %v", tt.stdoutOff, tt.stderrOff, err)
			}
			if got.stdout != tt.wantStdout || got.stderr != tt.wantStderr {
				t.Errorf("re-attach with offsets %d/%d gave stdout %q, stderr %q; want %q, %q",
					tt.stdoutOff, tt.stderrOff, got.stdout, got.stderr, tt.wantStdout, tt.wantStderr)
			}
			// The counts are of everything the command wrote, whatever
			// this caller skipped.
			if got.StdoutBytes != 10 || got.StderrBytes != 10 {
				t.Errorf("StdoutBytes/StderrBytes = %d/%d, want 10/10", got.StdoutBytes, got.StderrBytes)
			}
		})
	}
}

// testOnceAttachAfterCancel is a caller that dies mid-command: the command
// carries on, and the retry gets all of it.
func testOnceAttachAfterCancel(t *testing.T, s *suite) {
	_, sb := s.sandbox(t)
	req := provider.ExecRequest{ID: "cancelled", Shell: "echo begin; sleep 5; echo ran >> cancel.log; echo end"}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout := newSignalWriter()
	first := req
	first.Stdout = stdout
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, first)
		done <- err
	}()
	select {
	case <-stdout.first:
	case err := <-done:
		t.Fatalf("Exec ended before the command's first output: %v", err)
	}
	cancel()
	cancelled := time.Now()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("Exec whose context was cancelled mid-command returned nil")
		} else if !errors.Is(err, context.Canceled) {
			t.Logf("Exec whose context was cancelled returned %v (not wrapping context.Canceled)", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("Exec did not return within 3s of its context being cancelled (the command runs 5s more)")
	}
	t.Logf("Exec returned %v after its context was cancelled", time.Since(cancelled))

	again, err := execute(t, sb, req)
	if err != nil {
		t.Fatalf("re-Exec of request %q after the first caller went away: %v", req.ID, err)
	}
	checkAttached(t, "re-Exec after the first caller went away", again, result{stdout: "begin\nend\n"})
	checkRuns(t, sb, "cancel.log", 1)
}
