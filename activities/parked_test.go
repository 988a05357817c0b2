package activities

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestParkedResumeWaitsForClaim: a host resuming a sandbox it parked
// (the fence, after a partition) and the sandbox's workflow pausing it
// at the same moment end with the sandbox paused and forgotten, in
// either order: the pause is never undone by a resume decided before
// it. Without the per-sandbox hold, the workflow's pause runs during the
// resume and the resume then wins.
func TestParkedResumeWaitsForClaim(t *testing.T) {
	p, err := OpenParked(filepath.Join(t.TempDir(), "parked"))
	if err != nil {
		t.Fatal(err)
	}
	r := ParkedRef{Provider: "linux", ID: "sb-1"}
	other := ParkedRef{Provider: "linux", ID: "sb-2"}
	if err := p.Add(r, other); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var events []string
	note := func(e string) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}
	resuming, finish := make(chan struct{}), make(chan struct{})
	unparked := make(chan error, 1)
	go func() {
		_, err := p.Unpark(r, func() error {
			note("resume begins")
			close(resuming)
			<-finish
			note("resume ends")
			return nil
		})
		unparked <- err
	}()
	<-resuming

	claimed := make(chan error, 1)
	go func() {
		claimed <- p.Claim(r, func() error { note("pause"); return nil })
	}()
	// Another sandbox is not held up by this one.
	if ok, err := p.Unpark(other, func() error { note("other resumed"); return nil }); !ok || err != nil {
		t.Fatalf("Unpark(other) = %v, %v; want true, nil", ok, err)
	}
	select {
	case err := <-claimed:
		t.Fatalf("Claim returned (%v) while the resume was under way", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(finish)
	if err := <-unparked; err != nil {
		t.Fatal(err)
	}
	if err := <-claimed; err != nil {
		t.Fatal(err)
	}
	want := []string{"resume begins", "other resumed", "resume ends", "pause"}
	if !slices.Equal(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	if p.Has(r) || p.Has(other) {
		t.Fatalf("still parked: %v %v", p.Has(r), p.Has(other))
	}
	if len(p.holds) != 0 {
		t.Fatalf("%d holds left", len(p.holds))
	}

	// Claimed first, then the resume finds it forgotten and leaves it.
	if err := p.Park(r, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := p.Claim(r, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	ok, err := p.Unpark(r, func() error { t.Error("resumed a sandbox its workflow paused"); return nil })
	if ok || err != nil {
		t.Fatalf("Unpark after Claim = %v, %v; want false, nil", ok, err)
	}
}

// TestParkedParkNotesFirst: Park writes the sandbox to the file before it
// pauses it, so a host that dies during the pause knows it at its next
// start; a failed resume leaves it parked for the next operation to
// try again; a nil set parks nothing but still pauses.
func TestParkedParkNotesFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parked")
	p, err := OpenParked(path)
	if err != nil {
		t.Fatal(err)
	}
	r := ParkedRef{Provider: "linux", ID: "sb-1"}
	err = p.Park(r, func() error {
		b, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(b), r.ID) {
			t.Errorf("paused before noted: file %q, %v", b, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Unpark(r, func() error { return os.ErrDeadlineExceeded }); err == nil {
		t.Fatal("Unpark hid the resume's error")
	}
	if !p.Has(r) {
		t.Fatal("a failed resume forgot the sandbox")
	}
	var nilSet *Parked
	paused := false
	if err := nilSet.Park(r, func() error { paused = true; return nil }); err != nil || !paused {
		t.Fatalf("nil Park: paused %v, %v", paused, err)
	}
	if ok, err := nilSet.Unpark(r, func() error { t.Error("nil set resumed"); return nil }); ok || err != nil {
		t.Fatalf("nil Unpark = %v, %v", ok, err)
	}
}
