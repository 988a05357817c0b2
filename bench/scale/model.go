package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/agent/tools"
	"github.com/berth-dev/berth/internal/fakemodel"
)

// The scripted model: a message "scale WORKFLOW_ID K" makes it answer
// with one shell call that appends "K" to ran.log and prints the
// command's own start and end (ns since the epoch); the call's result
// makes it answer "ok", which ends the turn. "check WORKFLOW_ID K"
// makes it cat ran.log instead, "template WORKFLOW_ID K" write the
// template's file, and "wake WORKFLOW_ID K" print that file and then
// run what "scale" runs. It keeps no state per session: what it
// answers depends on the conversation alone, so that any number of
// sessions can talk to it at once; what it sees of each turn it hands
// to the turn's waiter.

// turnCommand is the shell command of turn k.
func turnCommand(k int) string {
	return fmt.Sprintf(`s=$(date +%%s%%N); echo %d >> ran.log; e=$(date +%%s%%N); echo "ran $s $e"`, k)
}

const checkCommand = "cat ran.log"

// The template's turn writes templateFile; a wake's turn prints it
// before it runs turn k's command, so that a session made from the
// template's snapshot shows it woke with the template's workspace.
const (
	templateFile    = "template.txt"
	templateMark    = "berth-scale-template"
	templateCommand = "echo " + templateMark + " > " + templateFile
)

// wakeCommand is the shell command of a wake's turn k.
func wakeCommand(k int) string { return "cat " + templateFile + " && " + turnCommand(k) }

// turn is what the driver and the model see of one turn.
type turn struct {
	sent   time.Time // the driver's Send
	called time.Time // the model answered with the tool call
	back   time.Time // the call's result reached the model
	// start, end: the command's own clock, around its append.
	start, end time.Time
	output     string // the tool result, as the model got it
	calls      int    // tool calls answered for this turn: more than 1 is a model call retried
	once       sync.Once
	done       chan struct{}
}

// scripted answers the scripted model's requests and hands each turn's
// times to its waiter.
type scripted struct {
	mu    sync.Mutex
	turns map[string]*turn // by "WORKFLOW_ID K"
	// unknown counts requests for no turn the driver waits for (a turn
	// of an earlier run, retried).
	unknown int
}

func newModel() *scripted { return &scripted{turns: map[string]*turn{}} }

// expect registers a turn before its message is sent.
func (m *scripted) expect(key string) *turn {
	t := &turn{done: make(chan struct{})}
	m.mu.Lock()
	m.turns[key] = t
	m.mu.Unlock()
	return t
}

func (m *scripted) forget(key string) {
	m.mu.Lock()
	delete(m.turns, key)
	m.mu.Unlock()
}

var ranLine = regexp.MustCompile(`ran (\d+) (\d+)`)

func (m *scripted) respond(req fakemodel.Request) fakemodel.Reply {
	now := time.Now()
	var user string
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			user = req.Messages[i].Text()
			break
		}
	}
	f := strings.Fields(user)
	if len(f) != 3 || (f[0] != "scale" && f[0] != "check" && f[0] != "template" && f[0] != "wake") {
		return fakemodel.Reply{Text: "ok"}
	}
	k, _ := strconv.Atoi(f[2])
	key := f[1] + " " + f[2]
	m.mu.Lock()
	t := m.turns[key]
	if t == nil {
		m.unknown++
	}
	m.mu.Unlock()
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "user" {
		cmd := turnCommand(k)
		switch f[0] {
		case "check":
			cmd = checkCommand
		case "template":
			cmd = templateCommand
		case "wake":
			cmd = wakeCommand(k)
		}
		if t != nil {
			m.mu.Lock()
			t.called = now
			t.calls++
			m.mu.Unlock()
		}
		args, _ := json.Marshal(map[string]string{"command": cmd})
		return fakemodel.Reply{ToolCalls: []fakemodel.ToolCall{{ID: "call" + f[2], Name: tools.Shell, Arguments: string(args)}}}
	}
	if last.Role == "tool" && t != nil {
		out := last.Text()
		t.once.Do(func() {
			m.mu.Lock()
			t.back, t.output = now, out
			if g := ranLine.FindStringSubmatch(out); g != nil {
				s, _ := strconv.ParseInt(g[1], 10, 64)
				e, _ := strconv.ParseInt(g[2], 10, 64)
				t.start, t.end = time.Unix(0, s), time.Unix(0, e)
			}
			m.mu.Unlock()
			close(t.done)
		})
	}
	return fakemodel.Reply{Text: "ok"}
}

// checkLog reads ran.log's lines (after the tool result's "exit code
// 0") against the turns 1..n a session ran: the turns missing, and
// those that ran more than once or were never sent.
func checkLog(log string, n int) (lost, twice []int) {
	seen := map[int]int{}
	_, log, _ = strings.Cut(log, "exit code 0")
	for _, l := range strings.Fields(log) {
		if k, err := strconv.Atoi(l); err == nil {
			seen[k]++
			if k < 1 || k > n {
				twice = append(twice, k)
			}
		}
	}
	for k := 1; k <= n; k++ {
		switch {
		case seen[k] == 0:
			lost = append(lost, k)
		case seen[k] > 1:
			twice = append(twice, k)
		}
	}
	return lost, twice
}
