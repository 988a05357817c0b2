package tui

import (
	"time"
	"unicode/utf8"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/berth-dev/berth/agent"
)

// liveEvery is how often the streams followed are read: a stream is
// stored by the worker about as often (client.LiveEvery), and reading
// it through the session's relay is the only way to reach it, so this is
// the one tick of the UI; it runs only while a stream is followed.
const liveEvery = 100 * time.Millisecond

// maxLive bounds what is kept of each stream followed: its last bytes,
// as a terminal's scrollback would. A build's output can be megabytes.
const maxLive = 64 << 10

// live is one stream followed as it grows: a running call's stdout or
// stderr, or the text of the model call under way.
type live struct {
	off    int64  // the stream's bytes read so far
	buf    []byte // its last maxLive of them, at most
	cut    bool   // buf lost the stream's start
	failed bool   // a Read failed, logged once
}

func (l *live) add(p []byte) {
	l.off += int64(len(p))
	l.buf = append(l.buf, p...)
	if n := len(l.buf) - maxLive; n > 0 {
		// Cut at a rune's start, so that the text kept stays UTF-8.
		for n < len(l.buf) && !utf8.RuneStart(l.buf[n]) {
			n++
		}
		l.buf = append(l.buf[:0], l.buf[n:]...)
		l.cut = true
	}
}

// text is what the stream holds so far, but a rune whose last bytes
// have not come yet.
func (l *live) text() string {
	b := l.buf
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return string(b)
}

// liveKeys are the streams worth following in st: the running calls'
// output, and the text of the model call under way.
func liveKeys(st agent.State) []string {
	if st.Ended {
		return nil
	}
	var keys []string
	for _, c := range st.Turn.Calls {
		if c.Status != agent.StatusRunning {
			continue
		}
		for _, k := range []string{c.Stdout, c.Stderr} {
			if k != "" {
				keys = append(keys, k)
			}
		}
	}
	if st.Turn.Status == agent.StatusThinking && st.Turn.Stream != "" {
		keys = append(keys, st.Turn.Stream)
	}
	return keys
}

// Reading the streams, as messages.
type (
	// liveTickMsg is the time to read the streams again.
	liveTickMsg struct{ loop int }
	// readMsg is what a read of the streams brought, by key.
	readMsg struct {
		loop  int
		data  map[string][]byte
		errs  map[string]error
		again bool // a stream is further ahead than what is kept of it
	}
)

// follow makes the streams followed those of the state shown: it drops
// the others (a call done shows its Output instead), and starts reading
// if nothing reads yet.
func (m *model) follow() tea.Cmd {
	keys := liveKeys(m.state)
	if m.screen != chatScreen || len(keys) == 0 {
		m.stopLive()
		return nil
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
		if m.lives[k] == nil {
			if m.lives == nil {
				m.lives = map[string]*live{}
			}
			m.lives[k] = &live{}
		}
	}
	for k := range m.lives {
		if !want[k] {
			delete(m.lives, k)
		}
	}
	if m.reading {
		return nil // the loop under way reads the new keys too
	}
	m.reading = true
	return m.readLive()
}

// stopLive stops reading the streams and forgets them; a read in flight
// is then dropped.
func (m *model) stopLive() {
	m.lives = nil
	m.reading = false
	m.liveLoop++
}

// readLive reads every stream followed from where it got to.
func (m *model) readLive() tea.Cmd {
	ctx, b, id, loop := m.waitCtx, m.b, m.cur.ID, m.liveLoop
	offs := make(map[string]int64, len(m.lives))
	for k, l := range m.lives {
		offs[k] = l.off
	}
	return func() tea.Msg {
		msg := readMsg{loop: loop, data: map[string][]byte{}, errs: map[string]error{}}
		for k, off := range offs {
			p, err := b.Read(ctx, id, k, off)
			if err != nil {
				msg.errs[k] = err
				continue
			}
			msg.data[k] = p
			msg.again = msg.again || len(p) > maxLive
		}
		return msg
	}
}

// readReply shows what the streams brought, and reads them again in a
// while, or at once when one is further ahead than what is kept.
func (m *model) readReply(msg readMsg) tea.Cmd {
	if msg.loop != m.liveLoop {
		return nil // of a stream no longer followed
	}
	changed := false
	for k, p := range msg.data {
		if l := m.lives[k]; l != nil && len(p) > 0 {
			l.add(p)
			changed = true
		}
	}
	for k, err := range msg.errs {
		// Not on the error line: a stream not stored yet, or gone with
		// its call, is simply empty, and the Wait says what matters.
		if l := m.lives[k]; l != nil && !l.failed && m.waitCtx.Err() == nil {
			l.failed = true
			m.log.Debug("berth chat: read a live stream", "session", m.cur.ID, "key", k, "error", err)
		}
	}
	if changed {
		m.refresh()
	}
	if len(m.lives) == 0 || m.waitCtx.Err() != nil {
		m.stopLive()
		return nil
	}
	if msg.again {
		return m.readLive()
	}
	loop := m.liveLoop
	return tea.Tick(liveEvery, func(time.Time) tea.Msg { return liveTickMsg{loop: loop} })
}

// liveTick reads the streams again, if they are still followed.
func (m *model) liveTick(msg liveTickMsg) tea.Cmd {
	if msg.loop != m.liveLoop {
		return nil
	}
	if len(m.lives) == 0 || m.screen != chatScreen {
		m.stopLive()
		return nil
	}
	return m.readLive()
}

// liveText is what the stream at key brought so far, for the view.
func (m *model) liveText(key string) (string, bool) {
	l := m.lives[key]
	if l == nil {
		return "", false
	}
	return l.text(), l.cut
}
