package chat

import "encoding/json"

// Role is who wrote a message.
type Role string

// The roles of the Chat Completions API that berth uses.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one message of a conversation.
type Message struct {
	Role    Role   `json:"role"`
	Content string `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID names, on a tool message, the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call the model asks for.
type ToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Arguments is a JSON object, as the model wrote it: it may be
	// malformed, and tools must say so rather than fail.
	Arguments string `json:"arguments"`
}

// ToolDef describes a tool to the model.
type ToolDef struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is the JSON Schema of the arguments, an object.
	Parameters json.RawMessage `json:"parameters"`
}

// Usage counts the tokens of one model call, or of many added up.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Add adds o to u.
func (u *Usage) Add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
}

// Segment names a stored part of a conversation.
type Segment struct {
	Key string `json:"key"`
	// SHA256 is the hex SHA-256 of the stored bytes, checked on reading.
	SHA256 string `json:"sha256"`
	// Messages is how many messages it holds.
	Messages int `json:"messages"`
}

// Request is the model activity's input.
type Request struct {
	// Conversation names the conversation: new segments go under
	// SegmentPrefix + Conversation + "/". It is a path element, such as
	// a session's id.
	Conversation string `json:"conversation"`
	// Segments is the conversation so far, oldest first: the previous
	// Response.Conversation, or nothing at the start.
	Segments []Segment `json:"segments,omitempty"`
	// New are the messages since: the first call's system and user
	// messages, the tool results of the last step.
	New []Message `json:"new"`
	// Tools are the tools the model may call.
	Tools []ToolDef `json:"tools,omitempty"`
	// Stream, when set, is the blob key (under transfer.Outputs) where
	// the answer's text is written as it streams, for front ends to
	// follow live (transfer's parts and relay).
	Stream string `json:"stream,omitempty"`
}

// Response is the model activity's result.
type Response struct {
	// Message is the model's answer: text, tool calls, or both.
	Message Message `json:"message"`
	// FinishReason is why the model stopped ("stop", "tool_calls",
	// "length", "content_filter").
	FinishReason string `json:"finish_reason"`
	Usage        Usage  `json:"usage"`
	// Model is the model that answered, as the server names it.
	Model string `json:"model,omitempty"`
	// Conversation is the whole conversation, the answer included: the
	// Segments of the next Request.
	Conversation []Segment `json:"conversation"`
	// Text is set when the answer's text is longer than MaxInlineText:
	// it is stored whole there, and Message.Content holds only its
	// start. The stored conversation holds it whole either way.
	Text *Stored `json:"text,omitempty"`
	// Arguments, when set, has one entry per tool call: where the
	// call's arguments are stored whole when they are longer than
	// MaxInlineArguments (Key empty when they are not), for front ends
	// that show a call (an approval). Message.ToolCalls carries them
	// whole, the workflow needing them to run the calls.
	Arguments []Stored `json:"arguments,omitempty"`
}

// Stored is a text kept in the blob store, too long for history: a
// stream in transfer's parts (transfer.ReadAt; a session's relay reads
// it for front ends).
type Stored struct {
	Key  string `json:"key,omitempty"`
	Size int64  `json:"size,omitempty"`
}

// Bounds of what a Response carries through workflow history. The
// model activity's own bounds on an answer (model.Config) are larger:
// what passes these is stored, and the Response names it.
const (
	// MaxInlineText is the most of an answer's text a Response carries.
	MaxInlineText = 16 << 10
	// MaxInlineArguments is the most of a tool call's arguments a front
	// end is shown inline; longer ones are stored too (Response.Arguments).
	MaxInlineArguments = 4 << 10
	// MaxCallBytes is the most bytes of tool-call arguments one Response
	// may carry, all calls together: they travel through history whole,
	// for the workflow to run the calls.
	MaxCallBytes = 1 << 20
	// MaxToolCalls is the most tool calls one Response may carry: each
	// call's result (up to 16 KiB, tools.MaxOutput) goes back to the
	// model through history.
	MaxToolCalls = 32
)
