package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/berth-dev/berth/agent"
	"github.com/berth-dev/berth/session"
)

const helpText = `enter sends · up, down, pgup, pgdown scroll · esc: the sessions
ctrl+c or /quit quits; the session goes on
/fork [title]       fork this session and open the fork
/switch <provider> [image]  move its workspace to another provider
                    (its default image, or the one named)
/title <name>       rename it
/approve, /deny     the tool call awaiting approval
/done keep          end it, keeping its workspace as a snapshot
/done destroy       end it, deleting its workspace
/sessions           the list of sessions
/help               this help`

func (m *model) chatKey(msg tea.KeyMsg) tea.Cmd {
	switch msg.Type {
	case tea.KeyEsc:
		m.say("")
		return m.toList()
	case tea.KeyEnter:
		line := strings.TrimSpace(m.input.Value())
		if line == "" {
			return nil
		}
		m.input.Reset()
		if strings.HasPrefix(line, "/") {
			return m.command(line)
		}
		return m.send(line)
	case tea.KeyPgUp, tea.KeyPgDown, tea.KeyUp, tea.KeyDown:
		var cmd tea.Cmd
		m.vp, cmd = m.vp.Update(msg)
		return cmd
	}
	var cmd tea.Cmd
	m.input, cmd = m.input.Update(msg)
	return cmd
}

// wait asks for the state once its Version is past after.
func (m *model) wait(after int) tea.Cmd {
	ctx, b, id, gen := m.waitCtx, m.b, m.cur.ID, m.gen
	return func() tea.Msg {
		st, err := b.Wait(ctx, id, after)
		return stateMsg{gen: gen, after: after, state: st, err: err}
	}
}

// seen is the Version of the state shown; -1 before the first, so that
// the first Wait answers at once with the state as it is.
func (m *model) seen() int {
	if !m.have {
		return -1
	}
	return m.state.Version
}

// stateReply shows a state and asks for the next one.
func (m *model) stateReply(msg stateMsg) tea.Cmd {
	if msg.gen != m.gen || m.screen != chatScreen {
		return nil // a session no longer shown
	}
	if msg.err != nil {
		if errors.Is(msg.err, context.Canceled) && m.waitCtx.Err() != nil {
			return nil
		}
		if m.cur.Status == session.StatusEnded {
			m.say(ended(m.cur)) // its workflow is gone: nothing to follow
			return nil
		}
		m.fail(msg.err)
		delay := m.retry
		m.retry = min(2*m.retry, lastRetry)
		gen := m.gen
		return tea.Tick(delay, func(time.Time) tea.Msg { return retryMsg{gen: gen} })
	}
	if m.isErr && m.retry > firstRetry {
		m.say("") // the Wait works again
	}
	m.retry = firstRetry
	after := msg.after
	if !m.have || msg.state.Version >= m.state.Version {
		m.state, m.have = msg.state, true
		after = max(after, msg.state.Version)
		m.dropShown()
		m.refresh()
	}
	live := m.follow()
	if m.state.Ended {
		return live
	}
	return tea.Batch(live, m.wait(after))
}

// dropShown forgets the messages sent that the state shows.
func (m *model) dropShown() {
	kept := m.sent[:0]
	for _, p := range m.sent {
		if p.Turn == 0 || p.Turn > m.state.Turn.Number {
			kept = append(kept, p)
		}
	}
	m.sent = kept
}

func (m *model) send(message string) tea.Cmd {
	m.help = false
	m.say("")
	m.sent = append(m.sent, pending{Message: message})
	m.refresh()
	m.vp.GotoBottom()
	ctx, b, id, gen := m.ctx, m.b, m.cur.ID, m.gen
	return func() tea.Msg {
		turn, err := b.Send(ctx, id, message)
		return sentMsg{gen: gen, turn: turn, message: message, err: err}
	}
}

func (m *model) sentReply(msg sentMsg) {
	if msg.gen != m.gen {
		if msg.err != nil {
			m.fail(msg.err)
		}
		return
	}
	for i, p := range m.sent {
		if p.Turn == 0 && p.Message == msg.message {
			if msg.err != nil {
				m.sent = append(m.sent[:i], m.sent[i+1:]...)
				if m.input.Value() == "" {
					m.input.SetValue(msg.message) // to send again
				}
			} else {
				m.sent[i].Turn = msg.turn
			}
			break
		}
	}
	if msg.err != nil {
		m.fail(msg.err)
	}
	m.dropShown()
	m.refresh()
}

// command runs a slash command.
func (m *model) command(line string) tea.Cmd {
	name, arg, _ := strings.Cut(strings.TrimPrefix(line, "/"), " ")
	arg = strings.TrimSpace(arg)
	ctx, b, id := m.ctx, m.b, m.cur.ID
	m.help = false
	switch name {
	case "help":
		m.help = true
		m.refresh()
		m.vp.GotoBottom()
		return nil
	case "quit":
		return m.quit()
	case "sessions":
		m.say("")
		return m.toList()
	case "fork":
		m.say("forking " + id + "…")
		return func() tea.Msg {
			info, err := b.Fork(ctx, session.ForkRequest{Session: id, Title: arg})
			return openMsg{info: info, note: fmt.Sprintf("forked %s as %s", id, info.ID), err: err}
		}
	case "switch":
		args := strings.Fields(arg)
		if len(args) == 0 || len(args) > 2 {
			m.fail(errors.New("/switch needs a provider, and may name an image: /switch <provider> [image]"))
			return nil
		}
		req := session.SwitchRequest{Session: id, Provider: args[0]}
		to := req.Provider
		if len(args) == 2 {
			req.Image = args[1]
			to += " (" + req.Image + ")"
		}
		m.say(fmt.Sprintf("moving %s to %s…", id, to))
		return func() tea.Msg {
			info, err := b.Switch(ctx, req)
			return infoMsg{info: info, note: fmt.Sprintf("%s is on %s", id, info.Provider), err: err}
		}
	case "title":
		if arg == "" {
			m.fail(errors.New("/title needs a name: /title <name>"))
			return nil
		}
		m.say("renaming " + id + "…")
		return func() tea.Msg {
			info, err := b.Rename(ctx, session.RenameRequest{Session: id, Title: arg})
			return infoMsg{info: info, note: fmt.Sprintf("%s is now %q", id, info.Title), err: err}
		}
	case "approve", "deny":
		c, ok := awaiting(m.state)
		if !ok {
			m.fail(errors.New("no tool call awaits approval"))
			return nil
		}
		approve := name == "approve"
		m.say("")
		return func() tea.Msg {
			return approveMsg{err: b.Approve(ctx, id, c.ID, approve)}
		}
	case "done":
		var keep bool
		switch arg {
		case "keep":
			keep = true
		case "destroy":
		default:
			m.say("/done keep keeps the workspace as a snapshot; /done destroy deletes it")
			return nil
		}
		m.say("ending " + id + "…")
		return func() tea.Msg {
			res, err := b.Destroy(ctx, session.DestroyRequest{Session: id, Keep: keep})
			return destroyMsg{id: id, keep: keep, snapshot: res.Snapshot, err: err}
		}
	}
	m.fail(fmt.Errorf("unknown command /%s: /help lists them", name))
	return nil
}

// awaiting is the current turn's call awaiting approval.
func awaiting(st agent.State) (agent.CallState, bool) {
	for i := len(st.Turn.Calls) - 1; i >= 0; i-- {
		if c := st.Turn.Calls[i]; c.Status == agent.StatusApproval {
			return c, true
		}
	}
	return agent.CallState{}, false
}

func (m *model) destroyed(msg destroyMsg) tea.Cmd {
	if msg.err != nil {
		m.fail(msg.err)
		return nil
	}
	switch {
	case msg.snapshot != "":
		m.say(fmt.Sprintf("ended %s; its workspace is kept as snapshot %s", msg.id, msg.snapshot))
	case msg.keep:
		m.say(fmt.Sprintf("ended %s; its workspace is kept", msg.id))
	default:
		m.say(fmt.Sprintf("destroyed %s", msg.id))
	}
	if m.screen == chatScreen && m.cur.ID == msg.id {
		return m.toList()
	}
	return m.list()
}

// wrapped is text wrapped to width.
func wrapped(text string, width int) string {
	var b strings.Builder
	writeWrapped(&b, "", text, width)
	return strings.TrimRight(b.String(), "\n")
}

// ended says that a session has ended, and why if it ended on its own.
func ended(info session.Info) string {
	if info.Error != "" {
		return "the session has ended: " + oneLine(info.Error, 500)
	}
	return "the session has ended"
}
