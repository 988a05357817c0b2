package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/berth-dev/berth/errdefs"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"gocloud.dev/blob"

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
		return chat.Response{}, temporal.NewNonRetryableApplicationError(err.Error(), string(errdefs.ModelRejected), nil)
	}
	if req.Stream != "" && !strings.HasPrefix(req.Stream, transfer.Outputs) {
		return chat.Response{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("model: stream key %q is not under %s", req.Stream, transfer.Outputs), string(errdefs.ModelRejected), nil)
	}
	past, err := m.segments.load(ctx, m.bucket, req.Segments)
	if errors.Is(err, chat.ErrBadSegment) {
		return chat.Response{}, temporal.NewNonRetryableApplicationError(err.Error(), string(errdefs.BadConversation), nil)
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
					fmt.Sprintf("model: tool %s: bad parameter schema: %v", t.Name, err), string(errdefs.ModelRejected), nil)
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
	if err := m.storeLong(ctx, req.Stream, &resp); err != nil {
		return chat.Response{}, err
	}
	return resp, nil
}

// storeLong keeps out of the result, which enters history, what of the
// answer is too long for it: its text past chat.MaxInlineText, stored
// next to the stream and named by resp.Text; and, for front ends, the
// tool calls' arguments past chat.MaxInlineArguments, named by
// resp.Arguments (the result carries them whole, bounded by
// chat.MaxCallBytes, for the workflow to run the calls).
func (m *Model) storeLong(ctx context.Context, stream string, resp *chat.Response) error {
	text := resp.Message.Content
	if len(text) > chat.MaxInlineText {
		if stream == "" {
			return toTemporal(&failure{typ: errdefs.AnswerTooLarge, msg: fmt.Sprintf(
				"model: the answer's text has %d bytes, more than history carries (%d), and the request names no stream to store it next to",
				len(text), chat.MaxInlineText)})
		}
		key := stream + ".text"
		if err := store(ctx, m.bucket, key, text); err != nil {
			return err
		}
		resp.Text = &chat.Stored{Key: key, Size: int64(len(text))}
		resp.Message.Content = prefix(text, chat.MaxInlineText)
	}
	if stream == "" {
		return nil
	}
	var long []chat.Stored
	for i, c := range resp.Message.ToolCalls {
		if len(c.Arguments) <= chat.MaxInlineArguments {
			continue
		}
		if long == nil {
			long = make([]chat.Stored, len(resp.Message.ToolCalls))
		}
		key := fmt.Sprintf("%s.call-%d", stream, i)
		if err := store(ctx, m.bucket, key, c.Arguments); err != nil {
			return err
		}
		long[i] = chat.Stored{Key: key, Size: int64(len(c.Arguments))}
	}
	resp.Arguments = long
	return nil
}

// store writes s whole under key, in transfer's parts.
func store(ctx context.Context, bucket *blob.Bucket, key, s string) error {
	w := transfer.NewPartWriter(ctx, bucket, key, transfer.DefaultPartSize, 0)
	if _, err := io.WriteString(w, s); err != nil {
		return fmt.Errorf("model: store %s: %w", key, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("model: store %s: %w", key, err)
	}
	return nil
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
		resp chat.Response
		ans  = gathered{cfg: m.cfg}
	)
	// stop ends the call at an answer past a bound, keeping what was
	// streamed for front ends. Returning closes the stream: nothing more
	// of it is read.
	stop := func(f *failure) (chat.Response, error) {
		if out != nil {
			mu.Lock()
			_ = out.FlushPartial()
			mu.Unlock()
		}
		return chat.Response{}, toTemporal(f)
	}
	for s.Next() {
		chunk := s.Current()
		if chunk.Model != "" {
			resp.Model = cut(chunk.Model, maxName)
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
				if f := ans.addCall(tc.Index, tc.ID, tc.Function.Name, tc.Function.Arguments); f != nil {
					return stop(f)
				}
			}
			if c.FinishReason != "" {
				resp.FinishReason = cut(c.FinishReason, maxName)
			}
			if f := ans.addText(d.Content); f != nil {
				return stop(f)
			}
			mu.Lock()
			prog.Chunks++
			prog.TextBytes += len(d.Content)
			prog.ToolCalls = len(ans.calls)
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
		if errors.Is(err, errEventTooLarge) {
			return stop(ans.tooLarge("%s", oneLine(err.Error())))
		}
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
	resp.Message = ans.message()
	for _, c := range resp.Message.ToolCalls {
		if c.ID == "" || c.Name == "" {
			return resp, toTemporal(&failure{typ: errdefs.BadModelAnswer,
				msg: fmt.Sprintf("model: %s sent a tool call without an id or a name (%q)", m.cfg.host(), c.Name)})
		}
	}
	if resp.FinishReason == "" {
		// No finish reason: the stream ended early, the connection lost.
		return resp, toTemporal(&failure{typ: errdefs.ModelUnavailable,
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
