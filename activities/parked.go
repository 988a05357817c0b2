package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/berth-dev/berth/provider"
	"github.com/berth-dev/berth/refs"
)

// Parked is the set of sandboxes a host paused as it stopped, kept in a
// file so that the host's next start knows them. Their workflows believe
// them running: the first operation on one resumes it (see
// Activities.sandbox), and a Pause leaves it paused, now the workflow's.
// A nil *Parked holds nothing.
type Parked struct {
	path string
	mu   sync.Mutex
	refs []ParkedRef
	// holds serialize the moves of one sandbox in and out of the set
	// with the pause or resume that goes with each (see hold).
	holds map[ParkedRef]*parkedHold
}

type parkedHold struct {
	sync.Mutex
	waiters int // holders and those waiting to be: the entry goes at 0
}

// ParkedRef names a parked sandbox.
type ParkedRef struct {
	Provider string `json:"provider"`
	ID       string `json:"id"`
}

// OpenParked reads the set kept at path; a missing file is an empty set.
func OpenParked(path string) (*Parked, error) {
	p := &Parked{path: path}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read parked sandboxes: %w", err)
	}
	if err := json.Unmarshal(b, &p.refs); err != nil {
		return nil, fmt.Errorf("read parked sandboxes %s: %w", path, err)
	}
	return p, nil
}

// Add notes refs as parked, on disk before it returns: a host writes
// what it is about to pause first, so that no sandbox is left frozen
// and unknown.
func (p *Parked) Add(refs ...ParkedRef) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.refs)
	for _, r := range refs {
		if !slices.Contains(p.refs, r) {
			p.refs = append(p.refs, r)
		}
	}
	if len(p.refs) == n {
		return nil
	}
	return p.save()
}

// Park notes r as parked, then pauses it with pause: the host's own
// pause (as it stops, or fenced off from the server). A pause that fails
// leaves r noted: its workflow's next operation resumes it, which does
// no harm to a sandbox that runs.
func (p *Parked) Park(r ParkedRef, pause func() error) error {
	if p == nil {
		return pause()
	}
	defer p.hold(r)()
	if err := p.Add(r); err != nil {
		return err
	}
	return pause()
}

// Unpark resumes r with resume and forgets it, if the host parked it,
// and says whether it did. It and Claim exclude each other for one
// sandbox, so that a resume decided before its workflow paused the
// sandbox never undoes that pause.
func (p *Parked) Unpark(r ParkedRef, resume func() error) (bool, error) {
	if p == nil {
		return false, nil
	}
	defer p.hold(r)()
	if !p.Has(r) {
		return false, nil
	}
	if err := resume(); err != nil {
		return false, err
	}
	return true, p.Remove(r)
}

// Claim pauses r with pause, by its workflow's wish, and forgets it as
// parked: paused now, it stays so until its workflow resumes it.
func (p *Parked) Claim(r ParkedRef, pause func() error) error {
	if p == nil {
		return pause()
	}
	defer p.hold(r)()
	if err := pause(); err != nil {
		return err
	}
	return p.Remove(r)
}

// hold waits until no one else holds r, and returns the release.
func (p *Parked) hold(r ParkedRef) (release func()) {
	p.mu.Lock()
	if p.holds == nil {
		p.holds = make(map[ParkedRef]*parkedHold)
	}
	h := p.holds[r]
	if h == nil {
		h = &parkedHold{}
		p.holds[r] = h
	}
	h.waiters++
	p.mu.Unlock()
	h.Lock()
	return func() {
		h.Unlock()
		p.mu.Lock()
		if h.waiters--; h.waiters == 0 {
			delete(p.holds, r)
		}
		p.mu.Unlock()
	}
}

// Has says whether r is parked.
func (p *Parked) Has(r ParkedRef) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.refs, r)
}

// Remove forgets r.
func (p *Parked) Remove(r ParkedRef) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i := slices.Index(p.refs, r)
	if i < 0 {
		return nil
	}
	p.refs = slices.Delete(p.refs, i, i+1)
	return p.save()
}

// Retain forgets the parked sandboxes keep does not hold (gone while the
// host was down) and returns those left.
func (p *Parked) Retain(keep func(ParkedRef) bool) ([]ParkedRef, error) {
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.refs)
	p.refs = slices.DeleteFunc(p.refs, func(r ParkedRef) bool { return !keep(r) })
	if len(p.refs) == n {
		return slices.Clone(p.refs), nil
	}
	return slices.Clone(p.refs), p.save()
}

// save writes the set whole, by rename: a crash leaves the old file or
// the new one.
func (p *Parked) save() error {
	b, err := json.Marshal(p.refs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.path), ".parked-*")
	if err != nil {
		return fmt.Errorf("write parked sandboxes: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write parked sandboxes: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write parked sandboxes: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write parked sandboxes: %w", err)
	}
	if err := os.Rename(tmp.Name(), p.path); err != nil {
		return fmt.Errorf("write parked sandboxes: %w", err)
	}
	return nil
}

// unpark resumes sb if its host parked it, and forgets it.
func (a *Activities) unpark(ctx context.Context, ref refs.Sandbox, sb provider.Sandbox) error {
	_, err := a.Parked.Unpark(ParkedRef{Provider: ref.Provider, ID: ref.ID}, func() error {
		if p, ok := sb.(provider.Pauser); ok {
			if err := p.Resume(ctx); err != nil {
				return fmt.Errorf("resume sandbox %s, paused by its host: %w", ref.ID, err)
			}
		}
		return nil
	})
	return err
}
