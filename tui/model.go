package tui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/key"
	"github.com/charmbracelet/bubbles/textinput"
	"github.com/charmbracelet/bubbles/viewport"
	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/session"
)

// The terminal's size until the first tea.WindowSizeMsg.
const (
	defaultWidth  = 80
	defaultHeight = 24
)

// Backoff of the Wait after a failed one: not a poll, a retry.
const (
	firstRetry = time.Second
	lastRetry  = 30 * time.Second
)

// screen is what the UI shows.
type screen int

const (
	listScreen screen = iota
	chatScreen
)

var barStyle = lipgloss.NewStyle().Reverse(true)

// model is the whole UI's state. Its methods run on bubbletea's loop;
// the Backend's calls run in tea.Cmds and come back as messages.
type model struct {
	ctx  context.Context
	b    Backend
	opts Options
	log  *slog.Logger

	width, height int
	screen        screen

	// The list.
	sessions []session.Info
	cursor   int
	// open is the session to open once the list is in (Options.Session).
	open string

	// The conversation.
	cur      session.Info
	state    agent.State
	have     bool // state holds a state of cur
	sent     []pending
	gen      int                // counts the sessions opened: a message of an older one is dropped
	waitCtx  context.Context    // the Waits' context, for as long as cur is shown
	stopWait context.CancelFunc // cancels it
	retry    time.Duration      // the next retry's delay after a failed Wait
	help     bool

	// The streams followed live (live.go), by key: the running calls'
	// output, the model's text under way.
	lives    map[string]*live
	reading  bool // a read of them, or the tick before it, is in flight
	liveLoop int  // counts the reading loops: a message of an older one is dropped

	// notice is one line above the status bar: what is under way, or an
	// error.
	notice string
	isErr  bool

	input textinput.Model
	vp    viewport.Model
}

// The Backend's answers, as messages.
type (
	listMsg struct {
		sessions []session.Info
		err      error
	}
	// openMsg is a session created or forked, to open.
	openMsg struct {
		info session.Info
		note string
		err  error
	}
	// infoMsg is a session renamed or switched.
	infoMsg struct {
		info session.Info
		note string
		err  error
	}
	sentMsg struct {
		gen     int
		turn    int
		message string
		err     error
	}
	stateMsg struct {
		gen   int
		after int
		state agent.State
		err   error
	}
	retryMsg   struct{ gen int }
	approveMsg struct{ err error }
	destroyMsg struct {
		id       string
		keep     bool
		snapshot string
		err      error
	}
)

func newModel(ctx context.Context, b Backend, opts Options) *model {
	in := textinput.New()
	in.Prompt = "> "
	in.Placeholder = "a message, or /help"
	in.CharLimit = agent.MaxMessage
	in.Cursor.SetMode(cursor.CursorStatic) // no blink: the screen changes only when something happened
	vp := viewport.New(defaultWidth, defaultHeight-3)
	vp.KeyMap = viewport.KeyMap{
		PageUp:   key.NewBinding(key.WithKeys("pgup")),
		PageDown: key.NewBinding(key.WithKeys("pgdown")),
		Up:       key.NewBinding(key.WithKeys("up")),
		Down:     key.NewBinding(key.WithKeys("down")),
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &model{ctx: ctx, b: b, opts: opts, log: log, width: defaultWidth, height: defaultHeight,
		open: opts.Session, input: in, vp: vp}
}

func (m *model) Init() tea.Cmd {
	return m.list()
}

func (m *model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.layout()
		return m, nil
	case tea.KeyMsg:
		if msg.Type == tea.KeyCtrlC {
			return m, m.quit()
		}
		if m.screen == listScreen {
			return m, m.listKey(msg)
		}
		return m, m.chatKey(msg)
	case listMsg:
		return m, m.listed(msg)
	case openMsg:
		if msg.err != nil {
			m.fail(msg.err)
			return m, nil
		}
		m.say(msg.note)
		return m, m.openSession(msg.info)
	case infoMsg:
		if msg.err != nil {
			m.fail(msg.err)
			return m, nil
		}
		if msg.info.ID == m.cur.ID {
			m.cur = msg.info
		}
		m.say(msg.note)
		return m, nil
	case sentMsg:
		m.sentReply(msg)
		return m, nil
	case stateMsg:
		return m, m.stateReply(msg)
	case readMsg:
		return m, m.readReply(msg)
	case liveTickMsg:
		return m, m.liveTick(msg)
	case retryMsg:
		if msg.gen != m.gen || m.screen != chatScreen {
			return m, nil
		}
		return m, m.wait(m.seen())
	case approveMsg:
		if msg.err != nil {
			m.fail(msg.err)
		}
		return m, nil
	case destroyMsg:
		return m, m.destroyed(msg)
	}
	return m, nil
}

func (m *model) View() string {
	var b strings.Builder
	if m.screen == listScreen {
		b.WriteString(m.listView())
	} else {
		b.WriteString(m.vp.View())
		b.WriteByte('\n')
		b.WriteString(m.noticeText())
		b.WriteByte('\n')
		b.WriteString(barStyle.Render(statusBar(m.cur, m.state, m.have, m.width)))
		b.WriteByte('\n')
		b.WriteString(m.input.View())
	}
	return b.String()
}

// layout fits the conversation to the terminal: all of it but the
// notice, the status bar and the input line.
func (m *model) layout() {
	m.vp.Width = m.width
	m.fit()
	m.input.Width = max(m.width-len(m.input.Prompt)-1, 1)
	m.refresh()
}

// fit gives the conversation the lines the notice leaves, keeping it at
// its end if it was there.
func (m *model) fit() {
	bottom := m.vp.AtBottom()
	m.vp.Height = max(m.height-2-m.noticeLines(), 1)
	if bottom {
		m.vp.GotoBottom()
	}
}

// refresh renders the conversation again, keeping it at its end if it
// was there.
func (m *model) refresh() {
	if m.screen != chatScreen {
		return
	}
	bottom := m.vp.AtBottom()
	text := transcript(m.state, m.sent, m.liveText, m.width)
	if m.help {
		text += "\n\n" + wrapped(helpText, m.width)
	}
	m.vp.SetContent(text)
	if bottom {
		m.vp.GotoBottom()
	}
}

// maxNoticeLines bounds the notice: an error's whole message shows,
// wrapped, up to these lines.
const maxNoticeLines = 8

// noticeText is the notice wrapped to the terminal's width, its lines
// after the first indented past "error: ".
func (m *model) noticeText() string {
	if m.notice == "" {
		return ""
	}
	prefix := ""
	if m.isErr {
		prefix = "error: "
	}
	var b strings.Builder
	writeWrapped(&b, prefix, m.notice, m.width)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > maxNoticeLines {
		lines = lines[:maxNoticeLines]
		lines[maxNoticeLines-1] = ansi.Truncate(lines[maxNoticeLines-1], max(m.width-1, 1), "") + "…"
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, m.width, "…") // a terminal narrower than wrapping's least
	}
	return strings.Join(lines, "\n")
}

// noticeLines is how many lines the notice takes: one when empty.
func (m *model) noticeLines() int {
	return max(strings.Count(m.noticeText(), "\n")+1, 1)
}

// say shows what happened or is under way; fail shows an error, in a
// line, wrapped to the terminal's width.
func (m *model) say(s string) {
	m.notice, m.isErr = s, false
	m.fit()
}

func (m *model) fail(err error) {
	if errors.Is(err, context.Canceled) && m.ctx.Err() != nil {
		return // quitting
	}
	m.log.Warn("berth chat", "session", m.cur.ID, "error", err)
	m.notice, m.isErr = oneLine(err.Error(), 500), true
	m.fit()
}

func (m *model) quit() tea.Cmd {
	m.closeSession()
	return tea.Quit
}

// list asks for the sessions.
func (m *model) list() tea.Cmd {
	ctx, b := m.ctx, m.b
	return func() tea.Msg {
		s, err := b.List(ctx)
		return listMsg{sessions: s, err: err}
	}
}

func (m *model) listed(msg listMsg) tea.Cmd {
	if msg.err != nil {
		m.fail(msg.err)
		return nil
	}
	m.sessions = msg.sessions
	m.cursor = min(m.cursor, max(len(m.sessions)-1, 0))
	if open := m.open; open != "" {
		m.open = ""
		for _, s := range m.sessions {
			if s.ID == open || s.Title == open {
				return m.openSession(s)
			}
		}
		m.fail(fmt.Errorf("no session %q", open))
	}
	return nil
}

func (m *model) listKey(msg tea.KeyMsg) tea.Cmd {
	switch msg.String() {
	case "q":
		return m.quit()
	case "up", "k":
		m.cursor = max(m.cursor-1, 0)
	case "down", "j":
		m.cursor = min(m.cursor+1, max(len(m.sessions)-1, 0))
	case "enter":
		if len(m.sessions) > 0 {
			m.say("")
			return m.openSession(m.sessions[m.cursor])
		}
	case "n":
		m.say("creating a session…")
		ctx, b, req := m.ctx, m.b, m.opts.New
		return func() tea.Msg {
			info, err := b.Create(ctx, req)
			return openMsg{info: info, note: "created session " + info.ID, err: err}
		}
	case "r":
		m.say("")
		return m.list()
	}
	return nil
}

func (m *model) listView() string {
	var b strings.Builder
	b.WriteString("berth chat: sessions\n\n")
	if len(m.sessions) == 0 {
		b.WriteString("no sessions yet: n starts one\n")
	}
	idW, titleW, provW := 0, 0, 0
	for _, s := range m.sessions {
		idW = max(idW, ansi.StringWidth(s.ID))
		titleW = max(titleW, ansi.StringWidth(oneLine(s.Title, 40)))
		provW = max(provW, ansi.StringWidth(s.Provider))
	}
	// The rows that fit, the cursor's among them: the header's two
	// lines, and the blank line, notice and keys below take the rest.
	rows := max(m.height-4-m.noticeLines(), 1)
	first := max(m.cursor-rows+1, 0)
	for i, s := range m.sessions {
		if i < first || i >= first+rows {
			continue
		}
		mark := "  "
		if i == m.cursor {
			mark = "* "
		}
		row := fmt.Sprintf("%s%-*s  %-*s  %-*s  %s", mark, idW, s.ID, titleW, oneLine(s.Title, 40), provW, s.Provider, s.Status)
		if s.ForkOf != "" {
			row += " (fork of " + s.ForkOf + ")"
		}
		if s.Error != "" {
			row += ": " + oneLine(s.Error, 200)
		}
		b.WriteString(ansi.Truncate(row, m.width, "…"))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(m.noticeText())
	b.WriteByte('\n')
	b.WriteString(barStyle.Render(ansi.Truncate("enter opens · n new session · r refresh · q quit", m.width, "…")))
	return b.String()
}

// openSession shows a session and starts following it.
func (m *model) openSession(info session.Info) tea.Cmd {
	m.closeSession()
	m.screen, m.cur, m.state, m.have, m.sent, m.help = chatScreen, info, agent.State{}, false, nil, false
	m.gen++
	m.retry = firstRetry
	ctx, cancel := context.WithCancel(m.ctx)
	m.stopWait = cancel
	m.waitCtx = ctx
	m.input.Reset()
	m.input.Focus()
	m.vp.SetContent("")
	m.layout()
	if info.Status == session.StatusEnded {
		m.say(ended(info))
	}
	return m.wait(m.seen())
}

// closeSession stops following the session shown.
func (m *model) closeSession() {
	m.stopLive()
	if m.stopWait != nil {
		m.stopWait()
		m.stopWait = nil
	}
}

// toList goes back to the list, and lists again.
func (m *model) toList() tea.Cmd {
	m.closeSession()
	m.screen = listScreen
	m.input.Blur()
	return m.list()
}
