package activities

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs/temporalerr"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"

	"github.com/berth-dev/berth/internal/testkit"
	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/provider/linux"
	"github.com/berth-dev/berth/refs"
	"github.com/berth-dev/berth/transfer"
)

func TestMain(m *testing.M) {
	linux.Main()
	os.Exit(m.Run())
}

type fixture struct {
	acts *Activities
	env  *testsuite.TestActivityEnvironment
	ref  refs.Sandbox
}

// newFixture makes activities over a real linux provider and a file blob
// store, and one sandbox.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir, err := os.MkdirTemp("", "berth")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o711)
	p, err := linux.New(linux.Config{StateDir: dir, Pool: -1})
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := fileblob.OpenBucket(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bucket.Close() })
	acts := &Activities{
		Providers: map[string]provider.Provider{"linux": p}, Outputs: bucket,
		GenericQueue: "berth", HostQueue: "berth-host",
		InlineCap: 1024, PartSize: 64 << 10,
	}
	f := &fixture{acts: acts, env: newEnv(acts)}
	env := f.env
	v, err := env.ExecuteActivity(acts.Create, CreateInput{Provider: "linux", Spec: provider.Spec{ID: "act"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&f.ref); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.ExecuteActivity(acts.Destroy, f.ref) })
	if f.ref.Queue != "berth-host" {
		t.Errorf("a linux sandbox is served from queue %q, want the host's", f.ref.Queue)
	}
	return f
}

func newEnv(acts *Activities) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return env
}

func (f *fixture) exec(t *testing.T, in ExecInput) ExecOutput {
	t.Helper()
	in.Sandbox = f.ref
	v, err := f.env.ExecuteActivity(f.acts.Exec, in)
	if err != nil {
		t.Fatalf("exec %+v: %v", in, err)
	}
	var out ExecOutput
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExecSmallOutputInline(t *testing.T) {
	f := newFixture(t)
	out := f.exec(t, ExecInput{ID: "small", Shell: "echo out; echo err >&2; exit 4"})
	if out.ExitCode != 4 || string(out.Stdout.Inline) != "out\n" || string(out.Stderr.Inline) != "err\n" {
		t.Errorf("got %+v", out)
	}
	if out.Stdout.Blob != "" || out.Stdout.Truncated {
		t.Errorf("a small output went to the blob store: %+v", out.Stdout)
	}
}

func TestExecLargeOutputStored(t *testing.T) {
	f := newFixture(t)
	// 300 KiB of numbered lines: several parts, far over the inline cap.
	out := f.exec(t, ExecInput{ID: "large", Shell: "seq 1 50000"})
	want := seqOutput(50000)
	if out.Stdout.Size != int64(len(want)) || !out.Stdout.Truncated || out.Stdout.Blob == "" {
		t.Fatalf("stdout = size %d truncated %v blob %q; want %d bytes stored", out.Stdout.Size, out.Stdout.Truncated, out.Stdout.Blob, len(want))
	}
	if !bytes.Equal(out.Stdout.Head(), want[:512]) || !bytes.Equal(out.Stdout.Tail(), want[len(want)-512:]) {
		t.Errorf("inline head or tail differ from the output's")
	}
	if got := readAll(t, f.acts.Outputs, out.Stdout); sha256.Sum256(got) != sha256.Sum256(want) {
		t.Errorf("the stored output (%d bytes) differs from the command's (%d)", len(got), len(want))
	}
}

// TestExecRetryAttaches runs the activity twice with the same command id,
// the second time with the heartbeat a crashed first attempt would have
// left: the command runs once and the output arrives whole.
func TestExecRetryAttaches(t *testing.T) {
	f := newFixture(t)
	in := ExecInput{ID: "retry", Shell: "echo ran >> runs; seq 1 50000"}
	first := f.exec(t, in)
	f.env.SetHeartbeatDetails(execProgress{Parts: [2]int{2, 0}})
	second := f.exec(t, in)
	if !second.Attached || first.Attached {
		t.Errorf("attached: first %v, second %v; want false, true", first.Attached, second.Attached)
	}
	f.env = newEnv(f.acts) // without the heartbeat of the retry
	runs := f.exec(t, ExecInput{ID: "count", Shell: "cat runs"})
	if string(runs.Stdout.Inline) != "ran\n" {
		t.Errorf("the command ran %q times", runs.Stdout.Inline)
	}
	want := seqOutput(50000)
	if got := readAll(t, f.acts.Outputs, second.Stdout); !bytes.Equal(got, want) {
		t.Errorf("after a retry the stored output has %d bytes, want %d", len(got), len(want))
	}
}

func TestExecTimeoutIsAResult(t *testing.T) {
	f := newFixture(t)
	out := f.exec(t, ExecInput{ID: "slow", Argv: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond})
	if !out.TimedOut {
		t.Errorf("got %+v, want a timed-out result", out)
	}
}

func TestErrorsAreTyped(t *testing.T) {
	f := newFixture(t)
	_, err := f.env.ExecuteActivity(f.acts.ListDir, PathInput{Sandbox: f.ref, Path: "../etc"})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != string(errdefs.BadInput) || !appErr.NonRetryable() {
		t.Fatalf("path escape: %v; want a non-retryable %s", err, errdefs.BadInput)
	}
	if back := temporalerr.From(err); !errors.Is(back, errdefs.ErrBadInput) {
		t.Errorf("temporalerr.From(%v) does not wrap ErrBadInput", err)
	}
	_, err = f.env.ExecuteActivity(f.acts.Exec, ExecInput{Sandbox: refs.Sandbox{Provider: "linux", ID: "nope"}, ID: "x", Argv: []string{"true"}})
	if !errors.Is(temporalerr.From(err), errdefs.ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
	_, err = f.env.ExecuteActivity(f.acts.Create, CreateInput{Provider: "nimbus"})
	if !errors.Is(temporalerr.From(err), errdefs.ErrBadInput) || !strings.Contains(err.Error(), "nimbus") {
		t.Errorf("unknown provider: %v, want bad input naming it", err)
	}
}

func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		b.WriteString(strconv.Itoa(i))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func readAll(t *testing.T, bucket *blob.Bucket, o transfer.Output) []byte {
	t.Helper()
	r, err := transfer.Open(t.Context(), bucket, o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFollowLive reads a command's output while it runs: what it printed
// before it slept arrives before it ends, and everything arrives in order.
func TestFollowLive(t *testing.T) {
	f := newFixture(t)
	in := ExecInput{Sandbox: f.ref, ID: "live", Shell: "seq 1 30000; echo marker; sleep 2; seq 30001 60000"}
	done := make(chan ExecOutput, 1)
	go func() {
		env := newEnv(f.acts)
		v, err := env.ExecuteActivity(f.acts.Exec, in)
		var out ExecOutput
		if err == nil {
			err = v.Get(&out)
		}
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	key := transfer.OutputKey(f.ref.ID, "live", "stdout")
	var got []byte
	sawMarkerEarly := false
	var out ExecOutput
	for finished := false; !finished; {
		select {
		case out = <-done:
			finished = true
		case <-time.After(50 * time.Millisecond):
		}
		b, err := transfer.ReadAt(t.Context(), f.acts.Outputs, key, f.acts.PartSize, int64(len(got)), 8<<20)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, b...)
		if !finished && bytes.Contains(got, []byte("marker\n")) {
			sawMarkerEarly = true
		}
	}
	if !sawMarkerEarly {
		t.Error("the output written before the sleep did not arrive before the command ended")
	}
	want := append(append(seqOutput(30000), "marker\n"...), bytes.TrimPrefix(seqOutput(60000), seqOutput(30000))...)
	if r := readAll(t, f.acts.Outputs, out.Stdout); !bytes.Equal(r, want) {
		t.Fatalf("stored output: %d bytes, want %d", len(r), len(want))
	}
	if !bytes.Equal(want[:len(got)], got) {
		t.Errorf("followed output (%d bytes) is not a prefix of the output", len(got))
	}
}

func (f *fixture) execLocal(t *testing.T, in ExecInput) LocalExecOutput {
	t.Helper()
	v, err := f.env.ExecuteLocalActivity(f.acts.ExecLocal, in)
	if err != nil {
		t.Fatalf("exec locally %+v: %v", in, err)
	}
	var out LocalExecOutput
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestExecLocal: a short command's result comes back from ExecLocal; a
// longer one is handed, running, to Exec, which returns its whole output
// without running it again or attaching to it anew.
func TestExecLocal(t *testing.T) {
	f := newFixture(t)
	short := f.execLocal(t, ExecInput{Sandbox: f.ref, ID: "short", Shell: "echo hi; exit 3"})
	if short.Handed || short.Elsewhere || short.ExitCode != 3 || string(short.Stdout.Inline) != "hi\n" {
		t.Errorf("short command: %+v", short)
	}

	// Output before the hand-over, during it and after it: several
	// parts, more than the sandbox's journal keeps.
	const n = 120000
	long := ExecInput{Sandbox: f.ref, ID: "long", Shell: fmt.Sprintf("seq 1 %d; sleep 1; seq %d %d", n/2, n/2+1, n)}
	if out := f.execLocal(t, long); !out.Handed {
		t.Fatalf("a command longer than the window was not handed over: %+v", out)
	}
	out := f.exec(t, long)
	if out.Attached || out.ExitCode != 0 {
		t.Errorf("taken over: attached %v (want a run handed over, not found again), exit %d", out.Attached, out.ExitCode)
	}
	if got, want := readAll(t, f.acts.Outputs, out.Stdout), seqOutput(n); !bytes.Equal(got, want) || out.Stdout.Incomplete {
		t.Errorf("output across the hand-over: %d bytes (incomplete %v), want %d", len(got), out.Stdout.Incomplete, len(want))
	}

	for name, in := range map[string]ExecInput{
		"another host's sandbox": {Sandbox: refs.Sandbox{Provider: "linux", ID: f.ref.ID, Queue: "berth@elsewhere"}, ID: "x"},
		"a provider not served":  {Sandbox: refs.Sandbox{Provider: "docker", ID: f.ref.ID, Queue: "berth-host"}, ID: "y"},
	} {
		if out := f.execLocal(t, in); !out.Elsewhere {
			t.Errorf("%s: %+v, want Elsewhere", name, out)
		}
	}
	var unregistered *Activities
	if out, err := unregistered.ExecLocal(t.Context(), long); err != nil || !out.Elsewhere {
		t.Errorf("on a worker without the activities: %+v, %v; want Elsewhere", out, err)
	}
}

// TestExecLocalAbandoned: a command handed over that no Exec comes for
// is let go after the grace; a later Exec attaches to it through the
// sandbox's journal.
func TestExecLocalAbandoned(t *testing.T) {
	f := newFixture(t)
	f.acts.handoffs.grace = 50 * time.Millisecond
	in := ExecInput{Sandbox: f.ref, ID: "abandoned", Shell: "echo start; sleep 1; echo end"}
	if out := f.execLocal(t, in); !out.Handed {
		t.Fatalf("not handed over: %+v", out)
	}
	testkit.Eventually(t, "the run handed over to be let go after its grace", 5*time.Second, func() bool {
		f.acts.handoffs.mu.Lock()
		defer f.acts.handoffs.mu.Unlock()
		return len(f.acts.handoffs.runs) == 0
	})
	out := f.exec(t, in)
	if !out.Attached || string(out.Stdout.Inline) != "start\nend\n" {
		t.Errorf("Exec after the grace: attached %v, stdout %q; want attached, the whole output", out.Attached, out.Stdout.Inline)
	}
}

// TestSweepTransfers: uploads and exports older than the age given go,
// newer ones and other objects stay; a stream whose last part is new
// stays whole.
func TestSweepTransfers(t *testing.T) {
	dir := t.TempDir()
	bucket, err := fileblob.OpenBucket(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	acts := &Activities{Outputs: bucket}
	old := time.Now().Add(-2 * time.Hour)
	keys := map[string]bool{ // key: old?
		transfer.Uploads + "sb-1-aa.tar":           true,
		transfer.Exports + "sb-1/run-1.tar/000000": true,
		transfer.Uploads + "sb-1-bb.tar":           false,
		"outputs/sb-1/sb-1-c1/stdout/000000":       true,
		// An upload under way: an old first part, a new second one.
		transfer.Uploads + "wf-1/u1/000000": true,
		transfer.Uploads + "wf-1/u1/000001": false,
		// An expired upload in two parts.
		transfer.Uploads + "wf-1/u2/000000": true,
		transfer.Uploads + "wf-1/u2/000001": true,
	}
	gone := func(key string) bool {
		return keys[key] && !strings.HasPrefix(key, "outputs/") && !strings.HasPrefix(key, transfer.Uploads+"wf-1/u1/")
	}
	for key, isOld := range keys {
		if err := bucket.WriteAll(t.Context(), key, []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
		if isOld {
			if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(key)), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := acts.SweepTransfers(t.Context(), time.Hour)
	if err != nil || n != 4 {
		t.Errorf("swept %d, %v; want 4", n, err)
	}
	for key := range keys {
		exists, _ := bucket.Exists(t.Context(), key)
		if exists == gone(key) {
			t.Errorf("%s: exists %v after the sweep", key, exists)
		}
	}
}

// TestOutputCap: a command printing past its output cap has its first
// and last bytes stored, the rest dropped and counted; nothing more is
// stored, however much it prints.
func TestOutputCap(t *testing.T) {
	f := newFixture(t)
	const max = 4 << 20
	want := seqOutput(3_000_000) // ~20 MiB
	out := f.exec(t, ExecInput{ID: "capped", Shell: "seq 1 3000000", MaxOutput: max})
	o := out.Stdout
	if o.Size != int64(len(want)) || o.Dropped != int64(len(want))-max || !o.Incomplete {
		t.Fatalf("size %d, dropped %d, incomplete %v; want size %d, dropped %d, incomplete",
			o.Size, o.Dropped, o.Incomplete, len(want), len(want)-max)
	}
	stored := readAll(t, f.acts.Outputs, o)
	head, tail := want[:max-transfer.OutputTail], want[len(want)-transfer.OutputTail:]
	if !bytes.Equal(stored, append(append([]byte{}, head...), tail...)) {
		t.Errorf("stored %d bytes: not the first %d and the last %d of the output", len(stored), len(head), len(tail))
	}
	if !bytes.HasSuffix(o.Inline, want[len(want)-100:]) {
		t.Errorf("the inline tail is not the output's end: ...%q (head %d, %d inline), want ...%q", o.Inline[len(o.Inline)-30:], o.HeadLen, len(o.Inline), want[len(want)-30:])
	}
}
