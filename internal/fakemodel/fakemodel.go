// Package fakemodel is a local stand-in for an OpenAI-compatible model
// server, for tests: an httptest server that answers POST
// /v1/chat/completions and GET /v1/models with scripted replies.
//
// It follows the shapes of the OpenAI API reference
// (https://platform.openai.com/docs/api-reference/chat): a request's
// model, messages (roles system, developer, user, assistant with
// tool_calls, tool with tool_call_id), tools of type "function",
// stream and stream_options.include_usage; a non-streamed answer as a
// "chat.completion" object; a streamed one as server-sent events, one
// "chat.completion.chunk" object per "data:" line, the first delta
// carrying the role, text in delta.content, tool calls in
// delta.tool_calls (by index: the first piece with the call's id, type
// and function name, the arguments in pieces after), a last chunk with
// the finish_reason, then, when include_usage is set, a chunk with no
// choices and the usage, and "data: [DONE]". Errors are
// {"error": {"message", "type", "param", "code"}} with the API's status
// codes, and a Retry-After header on 429. Like the real API it refuses
// a conversation whose tool messages do not answer the tool calls
// before them.
package fakemodel

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Defaults of a new server.
const (
	Model = "fake-model"
	Key   = "sk-fake"
)

// Reply is a scripted answer.
type Reply struct {
	Text      string
	ToolCalls []ToolCall
	// Usage overrides the counts the server makes up.
	Usage *Usage
	// FinishReason overrides "stop" (or "tool_calls").
	FinishReason string
	// CutAfter, when positive, cuts the streamed answer off once this
	// many bytes of its text are sent, as a lost connection would.
	CutAfter int
	// Piece is the size of the pieces the text and the arguments are
	// streamed in; zero means a few bytes, as a model streams tokens.
	Piece int
}

// ToolCall is a scripted function call.
type ToolCall struct {
	ID, Name, Arguments string
}

// Usage is the API's usage object.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Server is a fake model server. Its methods are safe for concurrent use.
type Server struct {
	// URL is the base URL, with its /v1, as OPENAI_BASE_URL takes it.
	URL string
	srv *httptest.Server

	mu         sync.Mutex
	key        string
	models     []string
	script     []Reply
	keyed      []keyedScript
	fails      []int // statuses of the next requests to fail
	retryAfter time.Duration
	drops      int // next streamed answers to cut off
	holds      []*Gate
	requests   []Request
	listStatus int // non-zero: GET /v1/models answers this, not a list
	// respond, when set, answers every request the script does not:
	// Respond.
	respond func(Request) Reply
}

// New starts a server serving Model behind Key; it stops when the test
// ends.
func New(t testing.TB) *Server {
	s := newServer()
	s.srv.Start()
	s.URL = s.srv.URL + "/v1"
	t.Cleanup(s.Close)
	return s
}

// Listen starts a server on addr (HOST:PORT) for a program, not a test
// (a benchmark's driver): Close stops it.
func Listen(addr string) (*Server, error) {
	s := newServer()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakemodel: %w", err)
	}
	s.srv.Listener.Close()
	s.srv.Listener = l
	s.srv.Start()
	s.URL = s.srv.URL + "/v1"
	return s, nil
}

// Respond has f answer each request the script has no reply left for,
// from what the request holds: a model whose replies depend on the
// conversation, for many sessions at once. Requests answered so are not
// kept (Requests): a long benchmark would hold them all.
func (s *Server) Respond(f func(Request) Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.respond = f
}

// NewDown returns a server that is down: its URL is refused until Up
// starts it, as a model server started after berth is.
func NewDown(t testing.TB) *Server {
	s := newServer()
	addr := s.srv.Listener.Addr().String()
	s.srv.Listener.Close()
	s.URL = "http://" + addr + "/v1"
	t.Cleanup(s.Close)
	return s
}

func newServer() *Server {
	s := &Server{key: Key, models: []string{Model}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("GET /v1/models/{model}", s.getModel)
	s.srv = httptest.NewUnstartedServer(mux)
	return s
}

// Up starts a server made by NewDown on its URL's address.
func (s *Server) Up(t testing.TB) {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatalf("fakemodel: listen again on %s: %v", u.Host, err)
	}
	s.srv.Listener = l
	s.srv.Start()
}

// NoModelList makes GET /v1/models answer status, as a server that
// lists no models does: 404, 405 or 501 with a plain-text body; 200
// with an HTML page, not JSON. Zero lists the models again.
func (s *Server) NoModelList(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listStatus = status
}

// Close stops the server, releasing held requests first.
func (s *Server) Close() {
	s.mu.Lock()
	holds := s.holds
	s.holds = nil
	s.mu.Unlock()
	for _, g := range holds {
		g.Release()
	}
	if s.srv.URL == "" {
		return // never started
	}
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Script queues replies, answered in order, one per completion request.
// A request with nothing left to answer fails with 400.
func (s *Server) Script(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = append(s.script, replies...)
}

// keyedScript is the script of the conversations whose first message
// holds key.
type keyedScript struct {
	key     string
	replies []Reply
}

// ScriptFor queues replies for the completion requests whose first
// message (the system prompt) contains key, answered in order, apart
// from Script's and the other keys': one conversation's script, for
// conversations that run at once, each told by its instructions. A
// request that matches a key with nothing left fails with 400.
func (s *Server) ScriptFor(key string, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.keyed {
		if s.keyed[i].key == key {
			s.keyed[i].replies = append(s.keyed[i].replies, replies...)
			return
		}
	}
	s.keyed = append(s.keyed, keyedScript{key: key, replies: replies})
}

// FailNext makes the next n completion requests fail with status (429,
// 500, 503...), before any scripted reply is used.
func (s *Server) FailNext(status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails = append(s.fails, status)
	}
}

// RetryAfter sets the Retry-After header of failures (whole seconds);
// zero sends none.
func (s *Server) RetryAfter(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryAfter = d
}

// DropNext cuts off the next n streamed answers after their first
// chunk, as a lost connection would.
func (s *Server) DropNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops += n
}

// SetKey changes the API key the server accepts.
func (s *Server) SetKey(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key = key
}

// Gate holds a request until released.
type Gate struct {
	arrived, released chan struct{}
	once              sync.Once
}

// Arrived is closed when the held request has arrived.
func (g *Gate) Arrived() <-chan struct{} { return g.arrived }

// Release lets the held request go on; releasing twice does nothing.
func (g *Gate) Release() { g.once.Do(func() { close(g.released) }) }

// Hold makes the next completion request wait, before it is answered,
// until the gate is released or its client goes away: a model call in
// flight, for crash tests.
func (s *Server) Hold() *Gate {
	g := &Gate{arrived: make(chan struct{}), released: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holds = append(s.holds, g)
	return g
}

// Requests returns the completion requests received so far, failed
// ones included.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Request is a completion request as received.
type Request struct {
	Model         string         `json:"model"`
	Messages      []Message      `json:"messages"`
	Tools         []Tool         `json:"tools"`
	Stream        bool           `json:"stream"`
	StreamOptions *StreamOptions `json:"stream_options"`
	// Authorization is the request's Authorization header.
	Authorization string `json:"-"`
	// Received is when it arrived.
	Received time.Time `json:"-"`
}

// StreamOptions are a request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is a request's message.
type Message struct {
	Role string `json:"role"`
	// Content is a string, an array of content parts, or null.
	Content    json.RawMessage   `json:"content"`
	ToolCalls  []MessageToolCall `json:"tool_calls"`
	ToolCallID string            `json:"tool_call_id"`
}

// Text is the message's text: its content string, or its text parts
// joined.
func (m Message) Text() string {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s
	}
	var parts []struct {
		Type, Text string
	}
	_ = json.Unmarshal(m.Content, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// MessageToolCall is a tool call of an assistant message.
type MessageToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a request's tool.
type Tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// apiError writes the API's error object.
func apiError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var c any
	if code != "" {
		c = code
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"message": msg, "type": typ, "param": nil, "code": c}})
}

// authorized checks the bearer key, answering 401 as the API does.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	key := s.key
	s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+key {
		apiError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key",
			"Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.")
		return false
	}
	return true
}

func (s *Server) serves(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.models {
		if m == model {
			return true
		}
	}
	return false
}

func modelObject(id string) map[string]any {
	return map[string]any{"id": id, "object": "model", "created": 1700000000, "owned_by": "fakemodel"}
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	status := s.listStatus
	s.mu.Unlock()
	switch status {
	case 0:
	case http.StatusOK:
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body>model server</body></html>\n")
		return
	default:
		http.Error(w, http.StatusText(status), status)
		return
	}
	if !s.authorized(w, r) {
		return
	}
	s.mu.Lock()
	data := []any{}
	for _, m := range s.models {
		data = append(data, modelObject(m))
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	id := r.PathValue("model")
	if !s.serves(id) {
		apiError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", id))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(modelObject(id))
}

// next takes what the server does with a completion request: a gate to
// wait at, a failure status, whether to cut the stream, the reply.
func (s *Server) next(req Request) (gate *Gate, fail int, retryAfter time.Duration, drop bool, reply Reply, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.holds) > 0 {
		gate, s.holds = s.holds[0], s.holds[1:]
	}
	if len(s.fails) > 0 {
		fail, s.fails = s.fails[0], s.fails[1:]
		return gate, fail, s.retryAfter, false, Reply{}, false
	}
	script := &s.script
	if len(req.Messages) > 0 {
		first := req.Messages[0].Text()
		for i := range s.keyed {
			if strings.Contains(first, s.keyed[i].key) {
				script = &s.keyed[i].replies
				break
			}
		}
	}
	if len(*script) == 0 {
		return gate, 0, 0, false, Reply{}, false
	}
	reply, *script = (*script)[0], (*script)[1:]
	if s.drops > 0 {
		s.drops--
		drop = true
	}
	return gate, 0, 0, drop, reply, true
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	var req Request
	err := json.NewDecoder(r.Body).Decode(&req)
	req.Authorization, req.Received = r.Header.Get("Authorization"), time.Now()
	s.mu.Lock()
	respond := s.respond
	if respond == nil || len(s.script) > 0 {
		s.requests = append(s.requests, req)
	}
	s.mu.Unlock()
	if !s.authorized(w, r) {
		return
	}
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	if msg := validate(req); msg != "" {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return
	}
	if !s.serves(req.Model) {
		apiError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", req.Model))
		return
	}
	gate, fail, retryAfter, drop, reply, ok := s.next(req)
	if !ok && fail == 0 && respond != nil {
		reply, ok = respond(req), true
	}
	if gate != nil {
		close(gate.arrived)
		select {
		case <-gate.released:
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case fail == http.StatusTooManyRequests:
		if retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter.Seconds())))
		}
		apiError(w, fail, "requests", "rate_limit_exceeded", "Rate limit reached for requests. Please try again later.")
		return
	case fail != 0:
		if retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter.Seconds())))
		}
		apiError(w, fail, "server_error", "", "The server had an error while processing your request. Sorry about that!")
		return
	case !ok:
		apiError(w, http.StatusBadRequest, "invalid_request_error", "", "fakemodel: no scripted reply left")
		return
	}
	usage := reply.usage(req)
	finish := reply.FinishReason
	if finish == "" {
		finish = "stop"
		if len(reply.ToolCalls) > 0 {
			finish = "tool_calls"
		}
	}
	if req.Stream {
		s.stream(w, req, reply, usage, finish, drop)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if reply.Text != "" || len(reply.ToolCalls) == 0 {
		msg["content"] = reply.Text
	}
	if len(reply.ToolCalls) > 0 {
		var calls []any
		for _, c := range reply.ToolCalls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": finish}},
		"usage":   usage, "system_fingerprint": nil,
	})
}

// validate refuses what the API refuses: no model, no messages, tool
// messages that answer no pending tool call, tool calls left unanswered.
func validate(req Request) string {
	if req.Model == "" {
		return "you must provide a model parameter"
	}
	if len(req.Messages) == 0 {
		return "[] is too short - 'messages'"
	}
	pending := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "tool":
			if !pending[m.ToolCallID] {
				return fmt.Sprintf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls' (messages[%d]).", i)
			}
			delete(pending, m.ToolCallID)
			continue
		case "system", "developer", "user", "assistant":
		default:
			return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'tool', 'function', and 'developer' (messages[%d].role).", m.Role, i)
		}
		if len(pending) > 0 {
			return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'."
		}
		for _, c := range m.ToolCalls {
			pending[c.ID] = true
		}
	}
	if len(pending) > 0 {
		return "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'."
	}
	return ""
}

// usage is the reply's usage: its own, or counts made up from the
// sizes, about four bytes a token.
func (r Reply) usage(req Request) Usage {
	if r.Usage != nil {
		return *r.Usage
	}
	var in, out int
	for _, m := range req.Messages {
		in += len(m.Content)
	}
	out = len(r.Text)
	for _, c := range r.ToolCalls {
		out += len(c.Name) + len(c.Arguments)
	}
	u := Usage{PromptTokens: int64(in/4 + 1), CompletionTokens: int64(out/4 + 1)}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// pieces cuts s into pieces of about n bytes, as a model streams
// tokens, keeping runes whole: each chunk is JSON, whose strings are
// whole characters.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		k := n
		for k < len(s) && !utf8Start(s[k]) {
			k++
		}
		out = append(out, s[:k])
		s = s[k:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// stream writes the reply as server-sent events.
func (s *Server) stream(w http.ResponseWriter, req Request, reply Reply, usage Usage, finish string, drop bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	var gone error // the client went away: nothing more is sent
	send := func(choices []any, usage any) {
		if gone != nil {
			return
		}
		b, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"system_fingerprint": nil, "choices": choices, "usage": usage,
		})
		// No copy of b: an answer may be sent in one large chunk.
		for _, p := range [][]byte{[]byte("data: "), b, []byte("\n\n")} {
			if gone == nil {
				_, gone = w.Write(p)
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "logprobs": nil, "finish_reason": finish}}
	}
	first := map[string]any{"role": "assistant", "content": "", "refusal": nil}
	if reply.Text == "" && len(reply.ToolCalls) > 0 {
		first["content"] = nil
	}
	send(delta(first, nil), nil)
	if drop {
		panic(http.ErrAbortHandler) // the connection is cut, no [DONE]
	}
	textPiece, argPiece := 5, 7
	if reply.Piece > 0 {
		textPiece, argPiece = reply.Piece, reply.Piece
	}
	sent := 0
	for _, p := range pieces(reply.Text, textPiece) {
		if gone != nil {
			return
		}
		send(delta(map[string]any{"content": p}, nil), nil)
		if sent += len(p); reply.CutAfter > 0 && sent >= reply.CutAfter {
			panic(http.ErrAbortHandler)
		}
	}
	for i, c := range reply.ToolCalls {
		send(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": ""}}}}, nil), nil)
		for _, p := range pieces(c.Arguments, argPiece) {
			if gone != nil {
				return
			}
			send(delta(map[string]any{"tool_calls": []any{map[string]any{"index": i,
				"function": map[string]any{"arguments": p}}}}, nil), nil)
		}
	}
	send(delta(map[string]any{}, finish), nil)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send([]any{}, usage)
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	if flusher != nil {
		flusher.Flush()
	}
}
