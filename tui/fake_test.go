package tui

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/session"
)

// fake is an in-memory Backend: a front-end test double. The test
// scripts each session's states with push; Wait answers the first one
// past after, or blocks until one is pushed.
type fake struct {
	mu       sync.Mutex
	sessions []session.Info
	states   map[string][]agent.State
	pushed   chan struct{} // closed and replaced on each push
	calls    []string      // "Method arg ...", in order
	fails    map[string]error
	turn     int
	streams  map[string][]byte // what Read returns, by key; write adds to it
	reads    map[string]int    // Read's calls, by key
}

func newFake(sessions ...session.Info) *fake {
	return &fake{sessions: sessions, states: map[string][]agent.State{}, pushed: make(chan struct{}), fails: map[string]error{},
		streams: map[string][]byte{}, reads: map[string]int{}}
}

// push adds states to session id's script, their Versions counted on.
func (f *fake) push(id string, sts ...agent.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, st := range sts {
		st.Version = len(f.states[id]) + 1
		f.states[id] = append(f.states[id], st)
	}
	close(f.pushed)
	f.pushed = make(chan struct{})
}

// fail makes method's calls fail with err; nil clears it.
func (f *fake) fail(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails[method] = err
}

func (f *fake) record(method string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := []string{method}
	for _, a := range args {
		parts = append(parts, fmt.Sprint(a))
	}
	f.calls = append(f.calls, strings.Join(parts, " "))
	return f.fails[method]
}

func (f *fake) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fake) find(id string) (int, error) {
	for i, s := range f.sessions {
		if s.ID == id || s.Title == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("NotFound: no session %q", id)
}

func (f *fake) add(title, provider, forkOf string) session.Info {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := fmt.Sprintf("s%d", len(f.sessions)+1)
	if title == "" {
		title = id
	}
	info := session.Info{ID: id, Title: title, Provider: provider, Status: session.StatusActive, ForkOf: forkOf}
	f.sessions = append(f.sessions, info)
	return info
}

func (f *fake) List(ctx context.Context) ([]session.Info, error) {
	if err := f.record("List"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sessions), nil
}

func (f *fake) Create(ctx context.Context, req session.CreateRequest) (session.Info, error) {
	if err := f.record("Create", req.Title, req.Provider, req.Approvals); err != nil {
		return session.Info{}, err
	}
	return f.add(req.Title, req.Provider, ""), nil
}

func (f *fake) Send(ctx context.Context, id, message string) (int, error) {
	if err := f.record("Send", id, message); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.turn++
	return f.turn, nil
}

func (f *fake) Wait(ctx context.Context, id string, after int) (agent.State, error) {
	f.mu.Lock()
	err := f.fails["Wait"]
	f.mu.Unlock()
	if err != nil {
		return agent.State{}, err
	}
	for {
		f.mu.Lock()
		sts, pushed := f.states[id], f.pushed
		f.mu.Unlock()
		if i := max(after, 0); i < len(sts) {
			return sts[i], nil // the state of Version i+1
		}
		select {
		case <-pushed:
		case <-ctx.Done():
			return agent.State{}, ctx.Err()
		}
	}
}

// write adds p to the stream at key, as a running command or the model
// would.
func (f *fake) write(key, p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams[key] = append(f.streams[key], p...)
}

// readCount is how many times key was read.
func (f *fake) readCount(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[key]
}

// Read answers what the stream holds from offset, at most maxChunk
// bytes, as client.Sessions does (not the calls list: 10 a second).
func (f *fake) Read(ctx context.Context, id, key string, offset int64) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads[key]++
	if err := f.fails["Read"]; err != nil {
		return nil, err
	}
	s := f.streams[key]
	if offset >= int64(len(s)) {
		return nil, nil
	}
	return slices.Clone(s[offset:min(int64(len(s)), offset+maxChunk)]), nil
}

// maxChunk is the most a Read returns, transfer.MaxChunk.
const maxChunk = 500 << 10

func (f *fake) Approve(ctx context.Context, id, callID string, approve bool) error {
	return f.record("Approve", id, callID, approve)
}

func (f *fake) Fork(ctx context.Context, req session.ForkRequest) (session.Info, error) {
	if err := f.record("Fork", req.Session, req.Title, req.Provider); err != nil {
		return session.Info{}, err
	}
	f.mu.Lock()
	i, err := f.find(req.Session)
	src := f.sessions[i]
	f.mu.Unlock()
	if err != nil {
		return session.Info{}, err
	}
	return f.add(req.Title, src.Provider, src.ID), nil
}

func (f *fake) Switch(ctx context.Context, req session.SwitchRequest) (session.Info, error) {
	if err := f.record("Switch", req.Session, req.Provider, req.Image); err != nil {
		return session.Info{}, err
	}
	return f.update(req.Session, func(s *session.Info) { s.Provider = req.Provider })
}

func (f *fake) Rename(ctx context.Context, req session.RenameRequest) (session.Info, error) {
	if err := f.record("Rename", req.Session, req.Title); err != nil {
		return session.Info{}, err
	}
	return f.update(req.Session, func(s *session.Info) { s.Title = req.Title })
}

func (f *fake) update(id string, change func(*session.Info)) (session.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(id)
	if err != nil {
		return session.Info{}, err
	}
	change(&f.sessions[i])
	return f.sessions[i], nil
}

func (f *fake) Destroy(ctx context.Context, req session.DestroyRequest) (session.DestroyResult, error) {
	if err := f.record("Destroy", req.Session, req.Keep); err != nil {
		return session.DestroyResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.find(req.Session)
	if err != nil {
		return session.DestroyResult{}, err
	}
	f.sessions = slices.Delete(f.sessions, i, i+1)
	if req.Keep {
		return session.DestroyResult{Snapshot: "snap-" + req.Session}, nil
	}
	return session.DestroyResult{}, nil
}

var _ Backend = (*fake)(nil)

// driver runs the model as bubbletea would, without a terminal: each
// command in a goroutine, each message it returns through Update on the
// test's goroutine.
type driver struct {
	t     *testing.T
	m     *model
	msgs  chan tea.Msg
	quit  bool
	ticks int // the liveTickMsgs handled
}

func drive(t *testing.T, b Backend, opts Options) *driver {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	d := &driver{t: t, m: newModel(ctx, b, opts), msgs: make(chan tea.Msg, 100)}
	d.send(tea.WindowSizeMsg{Width: 80, Height: 30})
	d.run(d.m.Init())
	return d
}

func (d *driver) run(cmd tea.Cmd) {
	if cmd == nil {
		return
	}
	go func() {
		msg := cmd()
		if batch, ok := msg.(tea.BatchMsg); ok {
			for _, c := range batch {
				d.run(c)
			}
			return
		}
		if msg != nil {
			d.msgs <- msg
		}
	}()
}

// send gives the model a message, as bubbletea does.
func (d *driver) send(msg tea.Msg) {
	if _, ok := msg.(tea.QuitMsg); ok {
		d.quit = true
		return
	}
	if _, ok := msg.(liveTickMsg); ok {
		d.ticks++
	}
	_, cmd := d.m.Update(msg)
	d.run(cmd)
}

// typ types text and presses enter.
func (d *driver) typ(text string) {
	d.send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(text)})
	d.send(tea.KeyMsg{Type: tea.KeyEnter})
}

func (d *driver) key(k tea.KeyType) { d.send(tea.KeyMsg{Type: k}) }

func (d *driver) view() string { return ansi.Strip(d.m.View()) }

// until handles the commands' messages until the view satisfies ok.
func (d *driver) until(what string, ok func(view string) bool) {
	d.t.Helper()
	deadline := time.After(5 * time.Second)
	for !ok(d.view()) {
		select {
		case msg := <-d.msgs:
			d.send(msg)
		case <-deadline:
			d.t.Fatalf("waited 5 s for %s; the view:\n%s", what, d.view())
		}
	}
}

// shows waits until the view holds every one of texts.
func (d *driver) shows(texts ...string) {
	d.t.Helper()
	d.until(fmt.Sprintf("%q", texts), func(v string) bool {
		for _, s := range texts {
			if !strings.Contains(v, s) {
				return false
			}
		}
		return true
	})
}

// settle handles the messages that come within a short while; for
// checking that something does not happen.
func (d *driver) settle() {
	for {
		select {
		case msg := <-d.msgs:
			d.send(msg)
		case <-time.After(50 * time.Millisecond):
			return
		}
	}
}

var errBoom = errors.New("unavailable: the server is gone")
