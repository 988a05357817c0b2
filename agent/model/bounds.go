package model

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/berth-dev/berth/errdefs"

	"github.com/openai/openai-go/v3/option"

	"github.com/berth-dev/berth/agent/chat"
)

// A model server's answer is read as it comes, and nothing of it is
// kept past Config's bounds. Those bound what is decoded; these bound
// what openai-go buffers before decoding: one server-sent event (a
// chunk) is held whole, and an error's body too.
const (
	// eventOverhead is room, in one event, for the JSON around the text
	// and arguments it carries.
	eventOverhead = 64 << 10
	// maxBody bounds a body that is not a stream: an error, the model
	// list.
	maxBody = 4 << 20
)

// errEventTooLarge: one event of the stream passed maxEvent.
var errEventTooLarge = errors.New("model: one event of the answer's stream is too large")

// maxEvent bounds one event: all of an answer's text and arguments,
// escaped (twice the bytes: a text of quotes and backslashes; one of
// control characters, six times, must come in more than one event).
func (c Config) maxEvent() int64 {
	return 2*int64(c.MaxText+chat.MaxCallBytes) + eventOverhead
}

// boundEvents returns the client's middleware that bounds what it
// reads: each event of a stream to maxEvent bytes, any other body to
// maxBody. Past the bound the body's Read fails with errEventTooLarge.
func boundEvents(maxEvent int64) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		res, err := next(req)
		if err != nil || res == nil || res.Body == nil {
			return res, err
		}
		if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt == "text/event-stream" {
			res.Body = &eventLimiter{ReadCloser: res.Body, max: maxEvent}
		} else {
			res.Body = &bodyLimiter{ReadCloser: res.Body, left: maxBody}
		}
		return res, nil
	}
}

// eventLimiter fails a stream once the bytes since its last blank line
// (the end of an event) pass max.
type eventLimiter struct {
	io.ReadCloser
	max   int64
	event int64 // bytes of the event under way
	line  int64 // bytes of the line under way, its \r not counted
}

func (l *eventLimiter) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	for _, b := range p[:n] {
		switch b {
		case '\n':
			if l.line == 0 {
				l.event = 0 // a blank line: the event is over
			}
			l.line = 0
		case '\r':
		default:
			l.line++
			l.event++
		}
		if l.event > l.max {
			return 0, fmt.Errorf("%w: more than %d bytes", errEventTooLarge, l.max)
		}
	}
	return n, err
}

// bodyLimiter fails a body past left bytes.
type bodyLimiter struct {
	io.ReadCloser
	left int64
}

func (l *bodyLimiter) Read(p []byte) (int, error) {
	n, err := l.ReadCloser.Read(p)
	if l.left -= int64(n); l.left < 0 {
		return 0, fmt.Errorf("%w: a body of more than %d bytes", errEventTooLarge, maxBody)
	}
	return n, err
}

// gathered is an answer as it streams in, bounded by the Config's
// bounds.
type gathered struct {
	cfg Config
	// text is the text in blocks of textBlock bytes, joined at the end:
	// appended to one slice, it would be copied some five times over as
	// it grows; kept as the pieces streamed (a token each), their
	// headers would outweigh it.
	text      [][]byte
	textBytes int
	calls     []chat.ToolCall
	args      [][]byte // each call's arguments, gathered
	argsBytes int      // all calls' together
}

// tooLarge is the activity's error for an answer past a bound.
func (g *gathered) tooLarge(format string, a ...any) *failure {
	return &failure{typ: errdefs.AnswerTooLarge, msg: fmt.Sprintf(format, a...) + ": the answer was refused, and not asked again"}
}

// addText adds a piece of text.
func (g *gathered) addText(s string) *failure {
	if g.textBytes+len(s) > g.cfg.MaxText {
		return g.tooLarge("model: the answer's text passed %d bytes", g.cfg.MaxText)
	}
	g.textBytes += len(s)
	for s != "" {
		if len(g.text) == 0 || len(g.text[len(g.text)-1]) == textBlock {
			g.text = append(g.text, make([]byte, 0, textBlock))
		}
		b := &g.text[len(g.text)-1]
		k := min(len(s), textBlock-len(*b))
		*b = append(*b, s[:k]...)
		s = s[k:]
	}
	return nil
}

// addCall adds a piece of tool call i.
func (g *gathered) addCall(i int64, id, name, args string) *failure {
	if i < 0 || i > int64(len(g.calls)) {
		return &failure{typ: errdefs.BadModelAnswer, msg: fmt.Sprintf("model: tool call index %d out of order", i)}
	}
	if int(i) == len(g.calls) {
		if len(g.calls) == g.cfg.MaxToolCalls {
			return g.tooLarge("model: the answer asked for more than %d tool calls", g.cfg.MaxToolCalls)
		}
		g.calls = append(g.calls, chat.ToolCall{})
		g.args = append(g.args, nil)
	}
	c := &g.calls[i]
	if len(id) > maxName {
		return &failure{typ: errdefs.BadModelAnswer, msg: fmt.Sprintf("model: tool call %d's id is longer than %d bytes", i, maxName)}
	}
	if id != "" {
		c.ID = id
	}
	if len(c.Name)+len(name) > maxName {
		return &failure{typ: errdefs.BadModelAnswer, msg: fmt.Sprintf("model: tool call %d's name is longer than %d bytes", i, maxName)}
	}
	c.Name += name
	if len(g.args[i])+len(args) > g.cfg.MaxArguments {
		return g.tooLarge("model: the arguments of tool call %d (%s) passed %d bytes", i, oneLine(c.Name), g.cfg.MaxArguments)
	}
	if g.argsBytes+len(args) > chat.MaxCallBytes {
		return g.tooLarge("model: the arguments of the answer's tool calls passed %d bytes together", chat.MaxCallBytes)
	}
	g.args[i] = append(g.args[i], args...)
	g.argsBytes += len(args)
	return nil
}

// textBlock is the size of the blocks an answer's text is gathered in.
const textBlock = 64 << 10

// maxName bounds a tool call's name: the tools' names are short, and
// an unknown one is repeated to the model.
const maxName = 256

// message is the whole answer.
func (g *gathered) message() chat.Message {
	calls := g.calls
	for i := range calls {
		calls[i].Arguments = string(g.args[i])
	}
	var text strings.Builder
	text.Grow(g.textBytes)
	for _, b := range g.text {
		text.Write(b)
	}
	return chat.Message{Role: chat.RoleAssistant, Content: text.String(), ToolCalls: calls}
}
