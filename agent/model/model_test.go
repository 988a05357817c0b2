package model_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/agent/model"
	"github.com/berth-dev/berth/internal/fakemodel"
	"github.com/berth-dev/berth/transfer"
)

// setup starts a fake model server and a Model on it, with a blob store.
func setup(t *testing.T) (*fakemodel.Server, *model.Model, *blob.Bucket) {
	t.Helper()
	srv := fakemodel.New(t)
	bucket := memblob.OpenBucket(nil)
	t.Cleanup(func() { bucket.Close() })
	m, err := model.New(model.Config{BaseURL: srv.URL, APIKey: fakemodel.Key, Model: fakemodel.Model,
		HeartbeatEvery: 20 * time.Millisecond, FlushEvery: 5 * time.Millisecond}, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return srv, m, bucket
}

// complete runs the activity once, as Temporal would, without retrying.
func complete(t *testing.T, m *model.Model, req chat.Request) (chat.Response, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	m.Register(env)
	val, err := env.ExecuteActivity(model.ActivityName, req)
	if err != nil {
		return chat.Response{}, err
	}
	var resp chat.Response
	if err := val.Get(&resp); err != nil {
		t.Fatal(err)
	}
	return resp, nil
}

var shellTool = chat.ToolDef{Name: "shell", Description: "runs a command",
	Parameters: []byte(`{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}`)}

func TestStreamingText(t *testing.T) {
	srv, m, bucket := setup(t)
	text := "Hello! Here is a longer answer, streamed in pieces: héllo wörld. "
	srv.Script(fakemodel.Reply{Text: text, Usage: &fakemodel.Usage{PromptTokens: 12, CompletionTokens: 34, TotalTokens: 46}})
	stream := transfer.Outputs + "agent/s1/turn-1"
	resp, err := complete(t, m, chat.Request{Conversation: "s1", Stream: stream, Tools: []chat.ToolDef{shellTool},
		New: []chat.Message{{Role: chat.RoleSystem, Content: "be brief"}, {Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Message.Role != chat.RoleAssistant || resp.Message.Content != text || resp.FinishReason != "stop" {
		t.Errorf("answer %+v, finish %q; want the text %q, stop", resp.Message, resp.FinishReason, text)
	}
	if want := (chat.Usage{PromptTokens: 12, CompletionTokens: 34, TotalTokens: 46}); resp.Usage != want {
		t.Errorf("usage %+v, want %+v", resp.Usage, want)
	}
	streamed, err := transfer.ReadAt(t.Context(), bucket, stream, 0, 0, 1<<20)
	if err != nil || string(streamed) != text {
		t.Errorf("streamed text %q (%v), want %q", streamed, err, text)
	}
	conv, err := chat.Load(t.Context(), bucket, resp.Conversation)
	if err != nil || len(conv) != 3 || conv[2].Content != text {
		t.Errorf("stored conversation %+v (%v), want system, user, the answer", conv, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if !r.Stream || r.StreamOptions == nil || !r.StreamOptions.IncludeUsage || r.Model != fakemodel.Model ||
		len(r.Tools) != 1 || r.Tools[0].Type != "function" || r.Tools[0].Function.Name != "shell" ||
		!strings.Contains(string(r.Tools[0].Function.Parameters), `"command"`) {
		t.Errorf("request %+v: want streamed, with usage, the model and the shell tool", r)
	}
	if r.Authorization != "Bearer "+fakemodel.Key {
		t.Errorf("authorization %q", r.Authorization)
	}
}

// Tool calls come in pieces across chunks; the next call carries their
// results, which the server accepts only after the assistant message
// with the calls, read back from the stored conversation.
func TestToolCalls(t *testing.T) {
	srv, m, _ := setup(t)
	calls := []fakemodel.ToolCall{
		{ID: "call_1", Name: "shell", Arguments: `{"command":"go test ./... && echo all good"}`},
		{ID: "call_2", Name: "read_file", Arguments: `{"path":"main.go","start_line":1,"end_line":40}`},
	}
	srv.Script(fakemodel.Reply{Text: "Let me look.", ToolCalls: calls}, fakemodel.Reply{Text: "All good."})
	resp, err := complete(t, m, chat.Request{Conversation: "s2", Tools: []chat.ToolDef{shellTool},
		New: []chat.Message{{Role: chat.RoleUser, Content: "run the tests"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.FinishReason != "tool_calls" || resp.Message.Content != "Let me look." || len(resp.Message.ToolCalls) != 2 {
		t.Fatalf("answer %+v, finish %q; want text and two tool calls", resp.Message, resp.FinishReason)
	}
	for i, c := range resp.Message.ToolCalls {
		if c.ID != calls[i].ID || c.Name != calls[i].Name || c.Arguments != calls[i].Arguments {
			t.Errorf("tool call %d: %+v, want %+v", i, c, calls[i])
		}
	}
	resp2, err := complete(t, m, chat.Request{Conversation: "s2", Segments: resp.Conversation, Tools: []chat.ToolDef{shellTool},
		New: []chat.Message{{Role: chat.RoleTool, ToolCallID: "call_1", Content: "ok"}, {Role: chat.RoleTool, ToolCallID: "call_2", Content: "package main"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp2.Message.Content != "All good." {
		t.Errorf("second answer %+v", resp2.Message)
	}
	second := srv.Requests()[1]
	if len(second.Messages) != 4 || len(second.Messages[1].ToolCalls) != 2 || second.Messages[3].ToolCallID != "call_2" {
		t.Errorf("second request's messages %+v: want user, assistant with two calls, two tool results", second.Messages)
	}
}

// appErr is the activity's error as an application error.
func appErr(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T), want an application error", err, err)
	}
	if strings.Contains(ae.Error(), "\n") {
		t.Errorf("error %q is more than one line", ae.Error())
	}
	return ae
}

func TestFailures(t *testing.T) {
	user := []chat.Message{{Role: chat.RoleUser, Content: "hi"}}
	tests := []struct {
		name      string
		prepare   func(*fakemodel.Server)
		typ       errdefs.Kind
		retryable bool
		delay     time.Duration
		says      string
	}{
		{name: "rate limited", prepare: func(s *fakemodel.Server) { s.FailNext(429, 1); s.RetryAfter(3 * time.Second) },
			typ: errdefs.ModelUnavailable, retryable: true, delay: 3 * time.Second, says: "429"},
		{name: "server error", prepare: func(s *fakemodel.Server) { s.FailNext(500, 1) },
			typ: errdefs.ModelUnavailable, retryable: true, says: "500"},
		{name: "connection lost", prepare: func(s *fakemodel.Server) { s.DropNext(1); s.Script(fakemodel.Reply{Text: "never whole"}) },
			typ: errdefs.ModelUnavailable, retryable: true, says: "lost"},
		{name: "bad key", prepare: func(s *fakemodel.Server) { s.SetKey("sk-other") },
			typ: errdefs.ModelAuth, says: "401"},
		{name: "nothing to answer", prepare: func(*fakemodel.Server) {}, typ: errdefs.ModelRejected, says: "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, m, _ := setup(t)
			tt.prepare(srv)
			_, err := complete(t, m, chat.Request{Conversation: "f", New: user})
			ae := appErr(t, err)
			if ae.Type() != string(tt.typ) || ae.NonRetryable() == tt.retryable || ae.NextRetryDelay() != tt.delay ||
				!strings.Contains(ae.Error(), tt.says) {
				t.Errorf("error %q: type %s, non-retryable %v, next retry delay %v; want %s, %v, %v, saying %q",
					ae.Error(), ae.Type(), ae.NonRetryable(), ae.NextRetryDelay(), tt.typ, !tt.retryable, tt.delay, tt.says)
			}
		})
	}
}

// A call answered before its first heartbeat is due completes without
// one: a heartbeat is a round trip to the server, written to the
// workflow's state, and the result follows at once.
func TestNoLastHeartbeat(t *testing.T) {
	srv, _, bucket := setup(t)
	m, err := model.New(model.Config{BaseURL: srv.URL, APIKey: fakemodel.Key, Model: fakemodel.Model,
		HeartbeatEvery: time.Hour}, bucket)
	if err != nil {
		t.Fatal(err)
	}
	srv.Script(fakemodel.Reply{Text: "quick"})
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestActivityEnvironment()
	m.Register(env)
	beats := 0
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beats++ })
	if _, err := env.ExecuteActivity(model.ActivityName, chat.Request{Conversation: "q",
		New: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}}); err != nil {
		t.Fatal(err)
	}
	if beats != 0 {
		t.Errorf("%d heartbeats for a call answered at once, want none", beats)
	}
}

// A conversation segment whose bytes changed is refused, not sent.
func TestBadSegment(t *testing.T) {
	srv, m, bucket := setup(t)
	srv.Script(fakemodel.Reply{Text: "first"}, fakemodel.Reply{Text: "second"})
	resp, err := complete(t, m, chat.Request{Conversation: "b", New: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.WriteAll(t.Context(), resp.Conversation[0].Key,
		[]byte(`{"messages":[{"role":"user","content":"something else"},{"role":"assistant","content":"first"}]}`), nil); err != nil {
		t.Fatal(err)
	}
	_, err = complete(t, m, chat.Request{Conversation: "b", Segments: resp.Conversation,
		New: []chat.Message{{Role: chat.RoleUser, Content: "again"}}})
	if ae := appErr(t, err); ae.Type() != string(errdefs.BadConversation) || !ae.NonRetryable() || !strings.Contains(ae.Error(), "SHA-256") {
		t.Errorf("altered segment: %v (type %s)", ae, ae.Type())
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d requests reached the server, want 1: the bad conversation must not be sent", n)
	}
}

func TestCheck(t *testing.T) {
	srv, m, _ := setup(t)
	if err := m.Check(t.Context()); err != nil {
		t.Errorf("check of a served model: %v", err)
	}
	bucket := memblob.OpenBucket(nil)
	defer bucket.Close()
	check := func(cfg model.Config) error {
		m, err := model.New(cfg, bucket)
		if err != nil {
			return err
		}
		return m.Check(t.Context())
	}
	dead := fakemodel.New(t)
	dead.Close()
	tests := []struct {
		name string
		cfg  model.Config
		says string
	}{
		{"unknown model", model.Config{BaseURL: srv.URL, APIKey: fakemodel.Key, Model: "gpt-nonesuch"}, `does not serve model "gpt-nonesuch"`},
		{"bad key", model.Config{BaseURL: srv.URL, APIKey: "sk-wrong", Model: fakemodel.Model}, "401"},
		{"unreachable", model.Config{BaseURL: dead.URL, APIKey: fakemodel.Key, Model: fakemodel.Model}, "unreachable"},
		{"no model", model.Config{BaseURL: srv.URL}, "BERTH_MODEL"},
		{"no key for OpenAI", model.Config{Model: "gpt-4.1"}, "OPENAI_API_KEY"},
		{"bad URL", model.Config{BaseURL: "localhost:8080", Model: "m"}, "OPENAI_BASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("check: %v; want one line saying %q", err, tt.says)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-secret")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
	t.Setenv("BERTH_MODEL", "qwen3")
	cfg := model.ConfigFromEnv()
	if cfg.APIKey != "sk-secret" || cfg.BaseURL != "http://127.0.0.1:11434/v1" || cfg.Model != "qwen3" {
		t.Errorf("config from the environment: %+v", cfg)
	}
	if s := cfg.String(); strings.Contains(s, "sk-secret") || !strings.Contains(s, "qwen3") {
		t.Errorf("String() = %q: it must name the model, never the key", s)
	}
}
