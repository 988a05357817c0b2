package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/berth-dev/berth/agent/chat"
	"github.com/berth-dev/berth/transfer"
)

// Progress is a call's heartbeat details: how far the answer got.
type Progress struct {
	Chunks    int `json:"chunks"`
	TextBytes int `json:"text_bytes"`
	ToolCalls int `json:"tool_calls"`
}

// Complete is the model activity: one call of the model on the
// conversation req names, streamed. See the package doc.
func (m *Model) Complete(ctx context.Context, req chat.Request) (chat.Response, error) {
	if err := chat.CheckConversation(req.Conversation); err != nil {
		return chat.Response{}, temporal.NewNonRetryableApplicationError(err.Error(), chat.ModelRejected, nil)
	}
	if req.Stream != "" && !strings.HasPrefix(req.Stream, transfer.Outputs) {
		return chat.Response{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("model: stream key %q is not under %s", req.Stream, transfer.Outputs), chat.ModelRejected, nil)
	}
	past, err := m.segments.load(ctx, m.bucket, req.Segments)
	if errors.Is(err, chat.ErrBadSegment) {
		return chat.Response{}, temporal.NewNonRetryableApplicationError(err.Error(), chat.BadConversation, nil)
	} else if err != nil {
		return chat.Response{}, err // the blob store: retried
	}
	params := openai.ChatCompletionNewParams{
		Model:         m.cfg.Model,
		Messages:      messages(append(append([]chat.Message(nil), past...), req.New...)),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
	for _, t := range req.Tools {
		def := shared.FunctionDefinitionParam{Name: t.Name, Description: openai.String(t.Description)}
		if len(t.Parameters) > 0 {
			if err := json.Unmarshal(t.Parameters, &def.Parameters); err != nil {
				return chat.Response{}, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("model: tool %s: bad parameter schema: %v", t.Name, err), chat.ModelRejected, nil)
			}
		}
		params.Tools = append(params.Tools, openai.ChatCompletionFunctionTool(def))
	}

	resp, err := m.stream(ctx, params, req.Stream)
	if err != nil {
		return chat.Response{}, err
	}
	resp.Conversation, err = chat.Append(ctx, m.bucket, req.Conversation, req.Segments, past,
		append(append([]chat.Message(nil), req.New...), resp.Message))
	if err != nil {
		return chat.Response{}, err
	}
	return resp, nil
}

// stream makes the call and gathers the streamed answer.
func (m *Model) stream(actx context.Context, params openai.ChatCompletionNewParams, key string) (chat.Response, error) {
	ctx, cancel := context.WithTimeout(actx, m.cfg.Timeout)
	defer cancel()
	var (
		mu    sync.Mutex // guards prog and out, shared with the ticker
		prog  Progress
		out   *transfer.PartWriter
		ended = make(chan struct{})
	)
	if key != "" {
		out = transfer.NewPartWriter(ctx, m.bucket, key, transfer.DefaultPartSize, 0)
		if err := m.resume(ctx, actx, out, key); err != nil {
			return chat.Response{}, err
		}
	}
	// The ticker heartbeats while the model thinks and sends nothing,
	// and stores the text streamed so far for front ends.
	var wg sync.WaitGroup
	wg.Go(func() {
		beat, flush := time.NewTicker(m.cfg.HeartbeatEvery), time.NewTicker(m.cfg.FlushEvery)
		defer beat.Stop()
		defer flush.Stop()
		for {
			select {
			case <-ended:
				return
			case <-beat.C:
				mu.Lock()
				p := prog
				mu.Unlock()
				activity.RecordHeartbeat(actx, p)
			case <-flush.C:
				if out != nil {
					mu.Lock()
					_ = out.FlushPartial() // a front end's view lags; the answer does not
					mu.Unlock()
				}
			}
		}
	})
	defer wg.Wait()
	defer close(ended)

	s := m.client.Chat.Completions.NewStreaming(ctx, params)
	defer s.Close()
	var (
		resp  chat.Response
		text  strings.Builder
		calls []chat.ToolCall
	)
	for s.Next() {
		chunk := s.Current()
		if chunk.Model != "" {
			resp.Model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			resp.Usage = chat.Usage{PromptTokens: chunk.Usage.PromptTokens,
				CompletionTokens: chunk.Usage.CompletionTokens, TotalTokens: chunk.Usage.TotalTokens}
		}
		for _, c := range chunk.Choices {
			if c.Index != 0 {
				continue // one choice asked for
			}
			d := c.Delta
			for _, tc := range d.ToolCalls {
				if tc.Index < 0 || tc.Index > int64(len(calls)) {
					return resp, toTemporal(&failure{typ: chat.BadModelAnswer,
						msg: fmt.Sprintf("model: tool call index %d out of order", tc.Index)})
				}
				if int(tc.Index) == len(calls) {
					calls = append(calls, chat.ToolCall{})
				}
				call := &calls[tc.Index]
				if tc.ID != "" {
					call.ID = tc.ID
				}
				call.Name += tc.Function.Name
				call.Arguments += tc.Function.Arguments
			}
			if c.FinishReason != "" {
				resp.FinishReason = c.FinishReason
			}
			text.WriteString(d.Content)
			mu.Lock()
			prog.Chunks++
			prog.TextBytes += len(d.Content)
			prog.ToolCalls = len(calls)
			if out != nil && d.Content != "" {
				_, err := out.Write([]byte(d.Content))
				if err != nil {
					mu.Unlock()
					return resp, fmt.Errorf("model: store the streamed answer: %w", err)
				}
			}
			mu.Unlock()
		}
	}
	if err := s.Err(); err != nil {
		if out != nil {
			// What came before the break stays for front ends, and for
			// the next attempt to go on from.
			mu.Lock()
			_ = out.FlushPartial()
			mu.Unlock()
		}
		if actx.Err() != nil {
			return resp, actx.Err() // cancelled, or the attempt timed out
		}
		return resp, toTemporal(m.describe(err, prog.Chunks > 0))
	}
	if out != nil {
		mu.Lock()
		err := out.Close()
		mu.Unlock()
		if err != nil {
			return resp, fmt.Errorf("model: store the streamed answer: %w", err)
		}
	}
	resp.Message = chat.Message{Role: chat.RoleAssistant, Content: text.String(), ToolCalls: calls}
	for _, c := range calls {
		if c.ID == "" || c.Name == "" {
			return resp, toTemporal(&failure{typ: chat.BadModelAnswer,
				msg: fmt.Sprintf("model: %s sent a tool call without an id or a name (%q)", m.cfg.host(), c.Name)})
		}
	}
	if resp.FinishReason == "" {
		// No finish reason: the stream ended early, the connection lost.
		return resp, toTemporal(&failure{typ: chat.ModelUnavailable,
			msg: fmt.Sprintf("model: the connection to %s was lost mid-answer: no finish reason", m.cfg.host())})
	}
	// No last heartbeat: the result follows at once, and the first
	// heartbeat of an attempt is a round trip to the server, written
	// to the workflow's state, before it.
	return resp, nil
}

// maxStreamed bounds what a retried attempt reads of the earlier ones'
// stream: far more than any answer's text.
const maxStreamed = 16 << 20

// retried is what a retried model call writes after what an earlier
// attempt streamed.
const retried = "\n[the model's answer was cut off; it is asked again]\n"

// resume starts a retried attempt's stream with what the earlier ones
// streamed, and a note, so that a front end reading on from where it
// was sees the new answer follow, not overwrite the old one.
func (m *Model) resume(ctx, actx context.Context, out *transfer.PartWriter, key string) error {
	if activity.GetInfo(actx).Attempt <= 1 {
		return nil
	}
	old, err := transfer.ReadAt(ctx, m.bucket, key, transfer.DefaultPartSize, 0, maxStreamed)
	if err != nil || len(old) == 0 {
		return err
	}
	if _, err := out.Write(append(old, retried...)); err != nil {
		return fmt.Errorf("model: store the streamed answer: %w", err)
	}
	return nil
}

// messages converts a conversation to the API's messages.
func messages(msgs []chat.Message) []openai.ChatCompletionMessageParamUnion {
	out := make([]openai.ChatCompletionMessageParamUnion, 0, len(msgs))
	for _, msg := range msgs {
		switch msg.Role {
		case chat.RoleSystem:
			out = append(out, openai.SystemMessage(msg.Content))
		case chat.RoleUser:
			out = append(out, openai.UserMessage(msg.Content))
		case chat.RoleTool:
			out = append(out, openai.ToolMessage(msg.Content, msg.ToolCallID))
		case chat.RoleAssistant:
			var a openai.ChatCompletionAssistantMessageParam
			if msg.Content != "" || len(msg.ToolCalls) == 0 {
				a.Content.OfString = openai.String(msg.Content)
			}
			for _, c := range msg.ToolCalls {
				a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
						ID:       c.ID,
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Arguments},
					}})
			}
			out = append(out, openai.ChatCompletionMessageParamUnion{OfAssistant: &a})
		}
	}
	return out
}
