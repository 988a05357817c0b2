package sandboxd

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berth-dev/berth/provider"
)

// TestPumpKeepsOutputBufferedAtGraceEnd: what a command wrote before it
// exited is in the pipe when the grace after its exit runs out if the
// pump was slow to get to it (a loaded machine, a reader holding the
// journal back): it is the command's output, and the journal keeps it.
// The pump used to drop it, and the command ended with success and an
// empty output.
func TestPumpKeepsOutputBufferedAtGraceEnd(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	want := "out-6\n" + strings.Repeat("x", 40<<10)
	if _, err := w.WriteString(want); err != nil {
		t.Fatal(err)
	}
	// A background process still holds the pipe: its end is not EOF.
	defer w.Close()
	// The grace ended before the pump read anything.
	if err := r.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	rec := newRecord("x", OutputCap)
	s.pump(rec, stdout, r)
	rec.mu.Lock()
	got := rec.out[stdout].total
	rec.mu.Unlock()
	if got != int64(len(want)) {
		t.Fatalf("journal holds %d bytes of stdout, want the %d in the pipe at the grace's end", got, len(want))
	}
	// What the holder writes after the grace is not waited for, nor kept.
	if _, err := w.WriteString("late"); err != nil {
		t.Fatalf("a late writer died of a broken pipe: %v", err)
	}
}

// TestExecOutputWholeWithoutGrace runs commands through a daemon whose
// grace after exit is as good as none, as a pump descheduled past it
// sees it: each command's output is whole all the same. Dropping what
// the pipe held failed a few of them in most runs.
func TestExecOutputWholeWithoutGrace(t *testing.T) {
	_, sock := serveConfig(t, Config{ExitGrace: time.Nanosecond})
	c := NewClient(UnixDialer(sock))
	t.Cleanup(c.Close)
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			var out bytes.Buffer
			want := fmt.Sprintf("out-%d\n", i)
			res, err := c.Exec(t.Context(), provider.ExecRequest{ID: fmt.Sprintf("c%d", i),
				Shell: fmt.Sprintf("echo out-%d; exit 6", i), Stdout: &out})
			if err != nil || res.ExitCode != 6 || out.String() != want {
				t.Errorf("command %d: exit %d, stdout %q, %v; want exit 6, stdout %q", i, res.ExitCode, out.String(), err, want)
			}
		})
	}
	wg.Wait()
}
